//! What every room may use and that knows nothing of the gateway: the bounded expiring map
//! (`ttl_map`), the worker runtimes (`workers`), giving memory back (`memory`), logging
//! (`telemetry`) and the rustls crypto provider (`tls`).

pub mod memory;
pub mod telemetry;
pub mod tls;
pub mod ttl_map;
pub mod workers;
