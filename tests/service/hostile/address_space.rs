//! A server under an address-space limit (RLIMIT_AS), as a container's memory limit holds it
//! and as `./dev bench-hostile` runs it (issue 42's acceptance): the largest requests arriving
//! together are answered, and the server lives on. Before, glibc's malloc arenas alone had
//! reserved half of a 1 GiB limit, and four 63 MiB raw uploads aborted the server ("memory
//! allocation failed"), losing every job it held.

use crate::helpers::ServerProcess;
use lottie_render::grpc::proto;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The limit `./dev bench-hostile` gives its server.
const ADDRESS_SPACE_LIMIT: u64 = 1 << 30;
/// Raw template uploads at once, from as many addresses (each its own share of the request
/// buffers), each just under CreateTemplate's 64 MiB.
const UPLOADS: u8 = 4;
const UPLOAD_BYTES: usize = 63 << 20;

/// A raw upload (`POST /v1/templates?name=…`) of `body` from 127.0.0.`host`; the status of
/// the answer (0 when the connection ended without one).
async fn raw_upload(server: SocketAddr, host: u8, body: Arc<Vec<u8>>) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from(([127, 0, 0, host], 0)))
        .unwrap();
    let stream = socket.connect(server).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /v1/templates?name=raw-{host} HTTP/1.1\r\nhost: {server}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let writing = tokio::spawn(async move {
        if write.write_all(head.as_bytes()).await.is_ok() {
            let _ = write.write_all(&body).await;
        }
        write
    });
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while !answer.windows(2).any(|pair| pair == b"\r\n") {
        match read.read(&mut chunk).await {
            Ok(read) if read > 0 => answer.extend_from_slice(&chunk[..read]),
            _ => break,
        }
    }
    let _ = writing.await;
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_server_under_a_1_gib_address_space_limit_answers_four_63_mib_uploads_at_once_and_serves_on(
) {
    let mut server = ServerProcess::start_with_address_space(ADDRESS_SPACE_LIMIT, &[]);
    let mut template =
        br#"{"v":"5.7.0","fr":30,"ip":0,"op":30,"w":100,"h":100,"layers":[],"x":""#.to_vec();
    template.resize(UPLOAD_BYTES - 2, b' ');
    template.extend_from_slice(br#""}"#);
    let body = Arc::new(template);
    let uploads = (0..UPLOADS).map(|index| raw_upload(server.address, 2 + index, body.clone()));
    let statuses = tokio::time::timeout(
        Duration::from_secs(120),
        futures_util::future::join_all(uploads),
    )
    .await
    .expect("the uploads were not answered");
    assert_eq!(server.exited(), None, "the server died: {:?}", server.log());
    // Each answered: past the template limit (422), or over its share of the buffers (429).
    for status in &statuses {
        assert!(
            [422, 429].contains(status),
            "{statuses:?}: {:?}",
            server.log()
        );
    }
    let listed = proto::template_service_client::TemplateServiceClient::new(server.channel().await)
        .list_templates(proto::ListTemplatesRequest::default())
        .await;
    assert!(listed.is_ok(), "{listed:?}");
}
