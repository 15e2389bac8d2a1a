// filled in with pairing
