//! The real `lottie-render serve` binary as a child process ([`ServerProcess`]): it serves,
//! reports its costs and stops cleanly.

use crate::helpers::{health_status, ServerProcess};
use std::time::Duration;

#[tokio::test]
async fn a_server_process_serves_reports_its_costs_and_stops_cleanly() {
    let server = ServerProcess::start(&["--workers", "1"]);
    let channel = server.channel().await;
    assert_eq!(
        health_status(&channel, "").await,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    assert!(server.peak_rss_bytes() >= server.rss_bytes() && server.rss_bytes() > 0);
    assert!(server.cpu_time() > Duration::ZERO);
    assert!(server.workers().is_empty());
    assert!(server.log().iter().any(|line| line.contains(" serving ")));
    assert_ne!(server.address, server.metrics_address);
    assert!(server.data_dir.path().join("data").is_dir());
    drop(channel);
    assert!(server.stop().await, "the server exits 0 on SIGTERM");
}
