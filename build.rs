//! Build script. The gRPC contract under `proto/` is compiled here once it exists (the
//! service issue); until then there is nothing to generate.

fn main() {
    println!("cargo:rerun-if-changed=proto");
}
