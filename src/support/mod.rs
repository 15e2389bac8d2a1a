//! What every room may use and that knows nothing of the gateway: the bounded expiring map
//! (`ttl_map`), a budget of bytes held at once (`byte_budget`), the map of config names (`name_map`), response compression and the
//! compressed-asset cache (`compress`), private files (`files`), this machine's names and
//! addresses (`host`), how a program is typed to run (`invocation`), DER validity (`der`), form encoding (`form`), the worker runtimes
//! (`workers`), a task's names (`task_name`), a moment as people read it (`when`), giving memory back (`memory`), logging (`telemetry`) and the rustls crypto
//! provider (`tls`).

pub mod byte_budget;
pub mod compress;
pub mod cron;
pub mod der;
pub mod files;
pub mod form;
pub mod host;
pub mod invocation;
pub mod memory;
pub mod name_map;
pub mod task_name;
pub mod telemetry;
pub mod tls;
pub mod ttl_map;
pub mod when;
pub mod workers;
