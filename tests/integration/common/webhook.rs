//! A webhook receiver on loopback, for the notifications tests.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::common::fake_upstream::serve;

/// A webhook receiver on 127.0.0.1:0: answers the statuses in `script` in turn, then 200, and
/// keeps each request's body.
pub async fn receiver(script: Vec<u16>) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (seen2, script) = (seen.clone(), Arc::new(Mutex::new(script.into_iter())));
    let (addr, _accepting) = serve(move |req: http::Request<hyper::body::Incoming>| {
        let (seen, script) = (seen2.clone(), script.clone());
        async move {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            seen.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
            let status = script.lock().unwrap().next().unwrap_or(200);
            let mut r = http::Response::new(Full::new(Bytes::new()));
            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Ok::<_, Infallible>(r)
        }
    })
    .await;
    (format!("http://{addr}/hook"), seen)
}
