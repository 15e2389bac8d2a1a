//! A loopback HTTP/1.1 server for the upstream's unit tests: it reads each request head on a
//! connection and does what the script says for that request (by its place on the connection,
//! from 1), counting the connections it accepted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// One step of a request's answer.
pub(crate) enum Act {
    Write(&'static [u8]),
    /// Close the connection without a word more.
    Close,
    /// Wait until the first is told, write the bytes, then tell the second.
    Later(Arc<Notify>, &'static [u8], Arc<Notify>),
    /// Wait this long (reading nothing meanwhile).
    Sleep(std::time::Duration),
}

/// A server following `script`; its address and the count of connections it accepted.
pub(crate) async fn serve(script: impl Fn(usize) -> Vec<Act> + Send + Sync + 'static) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (count, script) = (accepted.clone(), Arc::new(script));
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let script = script.clone();
            tokio::spawn(async move {
                let (mut seen, mut buf, mut requests) = (Vec::new(), [0u8; 1024], 0);
                loop {
                    let Ok(n) = tcp.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        requests += 1;
                        for act in script(requests) {
                            let written = match act {
                                Act::Write(bytes) => tcp.write_all(bytes).await,
                                Act::Close => return,
                                Act::Later(go, bytes, told) => {
                                    go.notified().await;
                                    let w = tcp.write_all(bytes).await;
                                    told.notify_one();
                                    w
                                }
                                Act::Sleep(d) => {
                                    tokio::time::sleep(d).await;
                                    Ok(())
                                }
                            };
                            if written.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}
