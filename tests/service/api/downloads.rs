//! DownloadRenderOutput of an output larger than two chunks: the chunks come in order, each
//! at most 1 MiB and none empty, their offsets adding up, and the sha256 of their
//! concatenation is the one the job reports and the one of the file on disk.

use crate::helpers::{download_chunks_through, sha256_hex, spawn_app};
use lottie_render::grpc::proto;

/// Photographs (43 embedded images) as a GIF at 640×454 make about 2.6 MiB (the test checks
/// that it is above two chunks).
const PHOTOGRAPHS: &str = "image-base64-43-images-precomps.json";
/// The largest chunk the service sends (README: "chunks of at most 1 MiB").
const CHUNK_BYTES: usize = 1024 * 1024;

#[tokio::test]
async fn an_output_above_two_mebibytes_downloads_in_ordered_chunks_with_its_sha256_intact() {
    let app = spawn_app().await;
    let template = app.create_template(PHOTOGRAPHS).await;
    let last = app
        .render(proto::RenderRequest {
            template_id: template.template_id.clone(),
            modifications: None,
            output: Some(proto::OutputSpec {
                format: proto::Format::Gif as i32,
                fps: 30,
                width: 640,
                height: 454,
                background: None,
                ..Default::default()
            }),
            notify: None,
            theme: String::new(),
        })
        .await;
    let job_id = last.job_id;
    let output = last.output.unwrap();

    let chunks = download_chunks_through(app.renders(), &job_id)
        .await
        .unwrap();
    assert!(
        output.size_bytes > 2 * CHUNK_BYTES as u64,
        "{} bytes: make the output larger (at least three chunks)",
        output.size_bytes
    );
    let sizes: Vec<usize> = chunks.iter().map(|chunk| chunk.data.len()).collect();
    let mut offset = 0u64;
    for (index, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk.offset, offset, "chunk {index} of {sizes:?}");
        assert!(
            (1..=CHUNK_BYTES).contains(&chunk.data.len()),
            "chunk {index} of {sizes:?}"
        );
        offset += chunk.data.len() as u64;
    }
    assert_eq!(offset, output.size_bytes);
    let bytes: Vec<u8> = chunks.into_iter().flat_map(|chunk| chunk.data).collect();
    assert_eq!(sha256_hex(&bytes), output.sha256);
    let file = app
        .data_dir
        .path()
        .join("outputs")
        .join(format!("{job_id}.gif"));
    assert_eq!(sha256_hex(&std::fs::read(file).unwrap()), output.sha256);
    // A GIF from its first bytes to its trailer.
    assert!(bytes.starts_with(b"GIF89a") && bytes.ends_with(&[0x3b]));
    app.stop().await;
}
