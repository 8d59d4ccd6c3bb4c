//! `spawn_app()`: the real server (`lottie_render::server::run`, as `serve` runs it) on
//! 127.0.0.1:0 with its own data directory, and clients connected to it.

use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use tokio::sync::oneshot;
use tonic::transport::Channel;

pub struct TestApp {
    pub channel: Channel,
    pub data_dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

pub async fn spawn_app() -> TestApp {
    let data_dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let settings = ServerSettings::new(address, data_dir.path().to_path_buf());
    let (shutdown, stop) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        lottie_render::server::run(
            lottie_render::server::Listeners {
                grpc: listener,
                metrics: None,
            },
            settings,
            async {
                let _ = stop.await;
            },
        )
        .await
        .unwrap();
    });
    // The listener is bound already, so connecting cannot race the server's start.
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    TestApp {
        channel,
        data_dir,
        shutdown: Some(shutdown),
        server: Some(server),
    }
}

impl TestApp {
    pub fn templates(&self) -> TemplateServiceClient<Channel> {
        TemplateServiceClient::new(self.channel.clone())
    }

    pub fn renders(&self) -> RenderServiceClient<Channel> {
        RenderServiceClient::new(self.channel.clone())
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
    }
}

pub fn corpus(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/corpus")
            .join(name),
    )
    .unwrap()
}
