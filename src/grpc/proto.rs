//! The generated contract (`proto/lottie/render/v1/*.proto`) and its descriptor set.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("lottie.render.v1");

/// The encoded `FileDescriptorSet` of the contract, for reflection and strict decoding.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("lottie_render_descriptor");

#[cfg(test)]
mod tests {
    use super::FILE_DESCRIPTOR_SET;
    use prost::Message;
    use prost_types::FileDescriptorSet;

    fn fields(set: &FileDescriptorSet, message: &str) -> Vec<(String, i32)> {
        set.file
            .iter()
            .flat_map(|file| &file.message_type)
            .find(|m| m.name() == message)
            .unwrap_or_else(|| panic!("no message {message}"))
            .field
            .iter()
            .map(|f| (f.name().to_owned(), f.number()))
            .collect()
    }

    #[test]
    fn the_contract_has_exactly_the_agreed_names_and_field_numbers() {
        let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let f = |pairs: &[(&str, i32)]| {
            pairs
                .iter()
                .map(|(n, i)| ((*n).to_owned(), *i))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fields(&set, "CreateTemplateRequest"),
            f(&[("name", 1), ("lottie_json", 2), ("fonts", 3)])
        );
        assert_eq!(
            fields(&set, "Template"),
            f(&[
                ("template_id", 1),
                ("name", 2),
                ("width", 3),
                ("height", 4),
                ("frame_rate", 5),
                ("in_frame", 6),
                ("out_frame", 7),
                ("duration_seconds", 8),
                ("text_slots", 9),
                ("color_slots", 10),
                ("sha256", 11),
                ("created_at", 12),
                ("warnings", 13),
                ("warnings_truncated", 14),
                ("slots_truncated", 15),
            ])
        );
        assert_eq!(
            fields(&set, "TextSlot"),
            f(&[
                ("id", 1),
                ("default_text", 2),
                ("font_family", 3),
                ("default_text_truncated", 4)
            ])
        );
        assert_eq!(
            fields(&set, "ColorSlot"),
            f(&[("id", 1), ("default_color", 2)])
        );
        assert_eq!(
            fields(&set, "ListTemplatesRequest"),
            f(&[("page_size", 1), ("page_token", 2)])
        );
        assert_eq!(
            fields(&set, "ListTemplatesResponse"),
            f(&[("templates", 1), ("next_page_token", 2)])
        );
        assert_eq!(
            fields(&set, "RenderRequest"),
            f(&[("template_id", 1), ("modifications", 2), ("output", 3)])
        );
        assert_eq!(
            fields(&set, "Modifications"),
            f(&[("texts", 1), ("colors", 2)])
        );
        assert_eq!(
            fields(&set, "Color"),
            f(&[("r", 1), ("g", 2), ("b", 3), ("a", 4)])
        );
        assert_eq!(
            fields(&set, "OutputSpec"),
            f(&[
                ("format", 1),
                ("fps", 2),
                ("width", 3),
                ("height", 4),
                ("background", 5)
            ])
        );
        assert_eq!(
            fields(&set, "RenderJob"),
            f(&[
                ("job_id", 1),
                ("template_id", 2),
                ("state", 3),
                ("frames_done", 4),
                ("frames_total", 5),
                ("output", 6),
                ("error", 7),
                ("created_at", 8),
                ("started_at", 9),
                ("finished_at", 10),
            ])
        );
        assert_eq!(
            fields(&set, "RenderOutput"),
            f(&[
                ("content_type", 1),
                ("size_bytes", 2),
                ("sha256", 3),
                ("width", 4),
                ("height", 5),
                ("fps", 6),
                ("frame_count", 7),
                ("duration_seconds", 8),
                ("download_url", 9),
                ("download_url_expires_at", 10),
            ])
        );
        assert_eq!(
            fields(&set, "JobError"),
            f(&[
                ("reason", 1),
                ("message", 2),
                ("retryable", 3),
                ("retry_after", 4)
            ])
        );
        assert_eq!(
            fields(&set, "OutputChunk"),
            f(&[("data", 1), ("offset", 2)])
        );
        for request in ["GetTemplateRequest", "DeleteTemplateRequest"] {
            assert_eq!(fields(&set, request), f(&[("template_id", 1)]));
        }
        for request in [
            "GetRenderJobRequest",
            "WatchRenderJobRequest",
            "CancelRenderJobRequest",
            "DownloadRenderOutputRequest",
        ] {
            assert_eq!(fields(&set, request), f(&[("job_id", 1)]));
        }
        let services: Vec<(String, Vec<String>)> = set
            .file
            .iter()
            .flat_map(|file| &file.service)
            .map(|s| {
                (
                    s.name().to_owned(),
                    s.method.iter().map(|m| m.name().to_owned()).collect(),
                )
            })
            .collect();
        assert!(services.contains(&(
            "TemplateService".into(),
            vec![
                "CreateTemplate".into(),
                "GetTemplate".into(),
                "ListTemplates".into(),
                "DeleteTemplate".into()
            ]
        )));
        assert!(services.contains(&(
            "RenderService".into(),
            vec![
                "SubmitRender".into(),
                "GetRenderJob".into(),
                "WatchRenderJob".into(),
                "CancelRenderJob".into(),
                "DownloadRenderOutput".into(),
            ]
        )));
    }
}
