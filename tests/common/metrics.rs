//! The metrics endpoint read as a test reads it: the exposition text and one sample's value
//! (a missing sample is not 0).

use std::net::SocketAddr;

/// The Prometheus text served at `address` (`GET /metrics`).
pub async fn metrics_text(address: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of `sample` (`name{labels}` exactly as exposed) in the exposition `text`.
pub fn sample_value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(sample)?.strip_prefix(' ')?;
        Some(
            value
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{sample} has no number: {line}")),
        )
    })
}

#[test]
fn a_missing_sample_is_not_zero() {
    let text = "# HELP lottie_render_jobs_finished Jobs that reached a terminal state.\n\
                # TYPE lottie_render_jobs_finished counter\n\
                lottie_render_jobs_finished_total{outcome=\"failed\"} 2\n\
                # TYPE lottie_render_queue_depth gauge\n\
                lottie_render_queue_depth 0\n\
                # EOF\n";
    assert_eq!(
        sample_value(
            text,
            "lottie_render_jobs_finished_total{outcome=\"failed\"}"
        ),
        Some(2.0)
    );
    assert_eq!(sample_value(text, "lottie_render_queue_depth"), Some(0.0));
    // A prefix of an exposed name is not that sample.
    assert_eq!(sample_value(text, "lottie_render_queue_dept"), None);
    assert_eq!(sample_value(text, "lottie_render_queue_depth_total"), None);
    assert_eq!(
        sample_value(
            text,
            "lottie_render_jobs_finished_total{outcome=\"succeeded\"}"
        ),
        None
    );
}
