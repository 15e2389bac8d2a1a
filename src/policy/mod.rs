//! Pure policy: functions of the canonical request, no I/O. Every decision the gateway makes
//! about a request is made here, once, on the form OpenCode's router will execute.
//!
//! - `canonical`: the one reading of a request path (decoded, case-folded where OpenCode ignores
//!   case, `;` parameters and repeated slashes dropped), and the spelling that is forwarded.
//! - `route`: which project (front door, host, `/p/<name>/`, the only project).
//! - `dialect`: what differs between OpenCode's major versions (route table, endpoints, spawn
//!   command, client commands).
//! - `authz`: OpenCode's route table × roles, and what each route needs (the route plan).
//! - `origin`: browser origin checks. `pin`: directory pinning. `scope`: shared-upstream scoping (`event_scope`:
//!   of the event streams).
//! - `query`: query strings read the way OpenCode reads them. `json_body`: the one reading of a
//!   client's JSON body that decisions are made on.

pub mod authz;
pub mod canonical;
pub mod config_secrets;
pub mod csrf;
pub mod dialect;
pub mod drift;
pub mod event_scope;
pub mod grants;
pub mod hook;
pub mod json_body;
pub mod origin;
pub mod permission;
pub mod pin;
pub mod plan;
pub mod query;
pub mod route;
pub mod routes;
pub mod routes_v2;
pub mod scope;
pub mod table;
