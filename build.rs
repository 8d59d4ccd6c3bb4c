//! Build script: compiles the gRPC contract under `proto/` into Rust (prost messages, tonic
//! services) and writes the file descriptor set that server reflection and strict decoding
//! (unknown-field detection) read at run time.

use std::path::PathBuf;

const PROTO_FILES: &[&str] = &[
    "proto/lottie/render/v1/common.proto",
    "proto/lottie/render/v1/template_service.proto",
    "proto/lottie/render/v1/render_service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // Undecodable bodies and unknown fields become INVALID_ARGUMENT (tonic's own codec
        // answers INTERNAL and prost drops unknown fields silently).
        .codec_path("crate::grpc::codec::StrictCodec")
        // `bytes` fields as `bytes::Bytes`: decoded from the received buffer they are slices
        // of it, not copies (a 63 MiB template would otherwise be held twice while decoded).
        .bytes(".")
        .file_descriptor_set_path(out_dir.join("lottie_render_descriptor.bin"))
        .compile_protos(PROTO_FILES, &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
