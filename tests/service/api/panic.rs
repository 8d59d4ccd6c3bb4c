//! A panic in a handler (a bug of ours) behind the server's own tower stack: INTERNAL with
//! ErrorInfo, a generic message, and the server and the connection keep serving. The
//! service's handlers have no reachable panic, so a service of this test's own stands in.

use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::grpc::proto::template_service_server::{TemplateService, TemplateServiceServer};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

struct PanicsOnGet;

#[tonic::async_trait]
impl TemplateService for PanicsOnGet {
    async fn create_template(
        &self,
        _: Request<proto::CreateTemplateRequest>,
    ) -> Result<Response<proto::Template>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn get_template(
        &self,
        request: Request<proto::GetTemplateRequest>,
    ) -> Result<Response<proto::Template>, Status> {
        let ids: Vec<u8> = Vec::new();
        // An out-of-bounds index: the kind of bug the layer exists for.
        let index = request.get_ref().template_id.len();
        Ok(Response::new(proto::Template {
            width: u32::from(ids[index]),
            ..Default::default()
        }))
    }
    async fn list_templates(
        &self,
        _: Request<proto::ListTemplatesRequest>,
    ) -> Result<Response<proto::ListTemplatesResponse>, Status> {
        Ok(Response::new(proto::ListTemplatesResponse::default()))
    }
    async fn delete_template(
        &self,
        _: Request<proto::DeleteTemplateRequest>,
    ) -> Result<Response<()>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn upload_image(
        &self,
        _: Request<proto::UploadImageRequest>,
    ) -> Result<Response<proto::Image>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn delete_image(
        &self,
        _: Request<proto::DeleteImageRequest>,
    ) -> Result<Response<()>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_the_server_keeps_serving() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = lottie_render::metrics::Metrics::new();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .layer(lottie_render::app::middleware(metrics.clone(), 16))
            .add_service(TemplateServiceServer::new(PanicsOnGet))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let mut client = TemplateServiceClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    for _ in 0..2 {
        let status = client
            .get_template(proto::GetTemplateRequest {
                template_id: "x".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        assert!(!status.message().contains("index out of bounds"));
        assert_eq!(
            status.get_error_details().error_info().unwrap().reason,
            "INTERNAL"
        );
        // The same connection still serves.
        client
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .unwrap();
    }
    assert!(metrics
        .encode()
        .contains("lottie_render_grpc_requests_total{method=\"GetTemplate\",code=\"Internal\"} 2"));
    server.abort();
}
