// A real OpenID Provider for the single sign-on tests: npm's certified `oidc-provider` with its
// built-in development login and consent pages (any password). It listens on 127.0.0.1 on a free
// port at once and prints `listening <port>`; the client's redirect URI names the gateway's port,
// which is known only after the gateway starts, so the provider itself is made when a line with
// that URI arrives on stdin (requests before then get 503). Then it prints `ready`.
// Env: CLIENT_ID, CLIENT_SECRET. Accounts: alice (alice@example.com, verified) and mallory.
import http from 'node:http';
import crypto from 'node:crypto';
import readline from 'node:readline';
import Provider from 'oidc-provider';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const [clientId, clientSecret] = ['CLIENT_ID', 'CLIENT_SECRET'].map(env);

const accounts = {
  alice: { sub: 'alice', email: 'alice@example.com', email_verified: true },
  mallory: { sub: 'mallory', email: 'mallory@example.com', email_verified: true },
};

let handler = null;
const server = http.createServer((req, res) => {
  if (handler) return handler(req, res);
  res.statusCode = 503;
  res.end('not ready');
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));

const lines = readline.createInterface({ input: process.stdin });
lines.once('line', (redirectUri) => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const key = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri.trim()],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    }],
    jwks: { keys: [{ ...key, kid: 'test-rsa', use: 'sig', alg: 'RS256' }] },
    findAccount: async (_ctx, id) => accounts[id] && { accountId: id, claims: async () => accounts[id] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'] },
    // Put the scope's claims in the ID token (the gateway reads no userinfo), as Google and most
    // providers do.
    conformIdTokenClaims: false,
    cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
    features: { devInteractions: { enabled: true } },
  });
  provider.on('server_error', (_ctx, err) => console.error('server_error', err));
  provider.on('grant.error', (_ctx, err) => console.error('grant.error', err.message, err.error_description || ''));
  handler = provider.callback();
  console.log('ready');
});
// The test ends by closing stdin or killing the process.
lines.on('close', () => process.exit(0));
