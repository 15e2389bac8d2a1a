//! The one reading of a client's JSON body (`policy::json_body::read`): any bytes, never a
//! panic; what it accepts serde_json accepts too and reads the same; written back out and read
//! again it is the same value (so no two readings of an accepted body differ); the redirect and
//! nested-substitution readings of a shell command never panic on any string it holds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::policy::json_body::{Body, read};
use opencode_gateway::policy::permission::{hides_commands, writes_by_redirect};

fuzz_target!(|data: &[u8]| {
    let Ok(body) = read(data) else { return };
    let Body::Json(v) = body else { return };
    let plain: serde_json::Value = serde_json::from_slice(data).expect("what the reading accepts, serde_json accepts");
    assert_eq!(plain, v, "read alike");
    let again = serde_json::to_vec(&v).unwrap();
    assert_eq!(read(&again).map(|b| b.value().clone()), Ok(v.clone()), "written back, read the same");
    if let Some(s) = v.as_str() {
        let _ = (writes_by_redirect(s), hides_commands(s));
    }
});
