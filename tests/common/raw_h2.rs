//! A raw HTTP/2 client (the `h2` crate) for the tests that open streams as no gRPC client
//! would: headers without a body, calls left half-sent.

use bytes::Bytes;
use prost::Message;
use std::net::SocketAddr;
use tonic::Status;

/// A raw HTTP/2 connection to the server.
pub async fn raw_connection(
    address: SocketAddr,
    builder: h2::client::Builder,
) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let (client, connection) = builder.handshake::<_, Bytes>(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client.ready().await.unwrap()
}

/// The headers of a gRPC call to `path`.
pub fn grpc_headers(address: SocketAddr, path: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://{address}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// `message` as one length-prefixed gRPC message.
pub fn grpc_message(message: &impl Message) -> Bytes {
    let encoded = message.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    Bytes::from(framed)
}

/// The gRPC status of a trailers-only answer (every refusal is one).
pub fn status_of(response: &http::Response<h2::RecvStream>) -> Option<Status> {
    Status::from_header_map(response.headers())
}
