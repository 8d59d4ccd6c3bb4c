//! How the server fits a service mesh and Kubernetes: connections closed after their age so
//! clients rebalance across replicas ([`connection_age`]), and the `liveness` and `readiness`
//! health services with what flips them ([`probes`]). Their settings (HTTP/2 keepalive,
//! connection age and grace, the least time a shutdown stays reachable) are
//! [`crate::config::mesh`], with the other settings.

pub(crate) mod connection_age;
pub mod probes;
