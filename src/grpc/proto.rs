//! The generated contract (`proto/lottie/render/v1/*.proto`) and its descriptor set.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("lottie.render.v1");

/// The encoded `FileDescriptorSet` of the contract, for reflection and strict decoding.
pub(crate) const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("lottie_render_descriptor");

/// The contract's descriptors, decoded once.
pub fn descriptor_pool() -> Result<&'static prost_reflect::DescriptorPool, String> {
    static POOL: std::sync::OnceLock<Result<prost_reflect::DescriptorPool, String>> =
        std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        prost_reflect::DescriptorPool::decode(FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(Clone::clone)
}

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
        // Each message's fields in the order of their numbers, from 1.
        let messages: &[(&str, &[&str])] = &[
            (
                "CreateTemplateRequest",
                &["name", "lottie_json", "fonts", "animation_id"],
            ),
            (
                "Template",
                &[
                    "template_id",
                    "name",
                    "width",
                    "height",
                    "frame_rate",
                    "in_frame",
                    "out_frame",
                    "duration_seconds",
                    "text_slots",
                    "color_slots",
                    "sha256",
                    "created_at",
                    "warnings",
                    "warnings_truncated",
                    "slots_truncated",
                    "image_slots",
                    "scalar_slots",
                    "vector_slots",
                    "gradient_slots",
                    "themes",
                    "animations",
                    "animation_id",
                    "markers",
                ],
            ),
            (
                "ScalarSlot",
                &["id", "property", "default_value", "min", "max"],
            ),
            ("VectorSlot", &["id", "property", "default_value"]),
            ("GradientSlot", &["id", "default_stops"]),
            ("Vector", &["values"]),
            ("Gradient", &["stops"]),
            ("GradientStop", &["offset", "color"]),
            ("ImageSlot", &["id", "width", "height", "has_default"]),
            ("ImageInput", &["data", "image_id", "fit"]),
            ("UploadImageRequest", &["data"]),
            (
                "Image",
                &["image_id", "format", "width", "height", "size_bytes"],
            ),
            ("DeleteImageRequest", &["image_id"]),
            (
                "TextSlot",
                &[
                    "id",
                    "default_text",
                    "font_family",
                    "default_text_truncated",
                ],
            ),
            ("ColorSlot", &["id", "default_color"]),
            ("ListTemplatesRequest", &["page_size", "page_token"]),
            ("ListTemplatesResponse", &["templates", "next_page_token"]),
            (
                "RenderRequest",
                &["template_id", "modifications", "output", "notify", "theme"],
            ),
            ("Notify", &["webhook_url", "events"]),
            (
                "WebhookDelivery",
                &[
                    "event",
                    "webhook_id",
                    "state",
                    "attempts",
                    "last_status",
                    "next_attempt_at",
                ],
            ),
            (
                "Modifications",
                &[
                    "texts",
                    "colors",
                    "images",
                    "scalars",
                    "vectors",
                    "gradients",
                ],
            ),
            ("Color", &["r", "g", "b", "a"]),
            (
                "OutputSpec",
                &[
                    "format",
                    "fps",
                    "width",
                    "height",
                    "background",
                    "at",
                    "segment",
                    "quality",
                    "loop_count",
                    "poster",
                ],
            ),
            ("Poster", &["at"]),
            ("TimePoint", &["seconds", "frame", "marker"]),
            ("Segment", &["seconds", "marker"]),
            ("SecondsRange", &["from", "to"]),
            ("Marker", &["name", "start_seconds", "duration_seconds"]),
            (
                "RenderJob",
                &[
                    "job_id",
                    "template_id",
                    "state",
                    "frames_done",
                    "frames_total",
                    "output",
                    "error",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "webhooks",
                ],
            ),
            (
                "RenderOutput",
                &[
                    "content_type",
                    "size_bytes",
                    "sha256",
                    "width",
                    "height",
                    "fps",
                    "frame_count",
                    "duration_seconds",
                    "download_url",
                    "download_url_expires_at",
                    "poster",
                    "poster_frame",
                ],
            ),
            (
                "JobError",
                &["reason", "message", "retryable", "retry_after"],
            ),
            ("OutputChunk", &["data", "offset", "output"]),
            ("GetTemplateRequest", &["template_id"]),
            ("DeleteTemplateRequest", &["template_id"]),
            ("GetRenderJobRequest", &["job_id"]),
            ("WatchRenderJobRequest", &["job_id"]),
            ("CancelRenderJobRequest", &["job_id"]),
            (
                "DownloadRenderOutputRequest",
                &["job_id", "offset", "length", "part"],
            ),
            (
                "ListRenderJobsRequest",
                &["page_size", "page_token", "state", "template_id", "reason"],
            ),
            ("ListRenderJobsResponse", &["jobs", "next_page_token"]),
            (
                "ServiceStatus",
                &[
                    "jobs_waiting",
                    "jobs_rendering",
                    "workers",
                    "workers_busy",
                    "refusals_last_hour",
                    "webhooks_pending",
                    "instance_id",
                    "version",
                ],
            ),
            ("RefusalCount", &["reason", "count"]),
        ];
        for (message, names) in messages {
            let numbered: Vec<(String, i32)> = (1..)
                .zip(names.iter())
                .map(|(number, name)| ((*name).to_owned(), number))
                .collect();
            assert_eq!(fields(&set, message), numbered, "{message}");
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
                "DeleteTemplate".into(),
                "UploadImage".into(),
                "DeleteImage".into()
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
                "ListRenderJobs".into(),
                "GetServiceStatus".into(),
            ]
        )));
    }

    /// A new row of `lottie::slots`' table fails here until the contract has its map in
    /// `Modifications` and its list in `Template`, and the reverse: a kind on the wire that
    /// the table does not know.
    #[test]
    fn every_slot_kind_has_its_map_in_modifications_and_its_list_in_template() {
        use crate::lottie::slots::SlotKind;
        let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let names = |message: &str| -> Vec<String> {
            fields(&set, message)
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        let maps: Vec<&str> = SlotKind::ALL.iter().map(|kind| kind.list()).collect();
        let mut wire_maps = names("Modifications");
        wire_maps.sort_by_key(|name| maps.iter().position(|list| list == name));
        assert_eq!(wire_maps, maps);
        let lists: Vec<String> = SlotKind::ALL
            .iter()
            .map(|kind| format!("{}_slots", kind.wire_name()))
            .collect();
        let mut wire_lists: Vec<String> = names("Template")
            .into_iter()
            .filter(|name| name.ends_with("_slots"))
            .collect();
        wire_lists.sort_by_key(|name| lists.iter().position(|list| list == name));
        assert_eq!(wire_lists, lists);
    }

    /// Each method's `google.api.http` rule as the descriptor set carries it: (method, verb,
    /// path template, body).
    fn http_rules() -> Vec<(String, String, String, String)> {
        let pool = prost_reflect::DescriptorPool::decode(FILE_DESCRIPTOR_SET).unwrap();
        let http = pool.get_extension_by_name("google.api.http").unwrap();
        let verbs = ["get", "put", "post", "delete", "patch"];
        pool.services()
            .flat_map(|service| service.methods().collect::<Vec<_>>())
            .map(|method| {
                let options = method.options();
                assert!(
                    options.has_extension(&http),
                    "{} has no rule",
                    method.name()
                );
                let rule = options.get_extension(&http);
                let rule = rule.as_message().unwrap();
                let (verb, template) = verbs
                    .iter()
                    .find(|verb| rule.has_field_by_name(verb))
                    .map(|verb| {
                        let template = rule.get_field_by_name(verb).unwrap();
                        ((*verb).to_owned(), template.as_str().unwrap().to_owned())
                    })
                    .unwrap_or_else(|| panic!("{}: no verb in {rule:?}", method.name()));
                let body = rule.get_field_by_name("body").unwrap();
                let body = body.as_str().unwrap().to_owned();
                (method.name().to_owned(), verb, template, body)
            })
            .collect()
    }

    /// The routes of the HTTP door (issue 23) are the annotations in the proto files, so a
    /// mesh's gRPC-JSON transcoder (Envoy) or grpc-gateway serves the same paths.
    #[test]
    fn every_method_has_the_agreed_http_route_in_its_annotation() {
        let mut rules = http_rules();
        rules.sort();
        let mut expected: Vec<(String, String, String, String)> = [
            (
                "CancelRenderJob",
                "post",
                "/v1/renders/{job_id}:cancel",
                "*",
            ),
            ("CreateTemplate", "post", "/v1/templates", "*"),
            ("UploadImage", "post", "/v1/images", "*"),
            ("DeleteImage", "delete", "/v1/images/{image_id}", ""),
            (
                "DeleteTemplate",
                "delete",
                "/v1/templates/{template_id}",
                "",
            ),
            (
                "DownloadRenderOutput",
                "get",
                "/v1/renders/{job_id}/output",
                "",
            ),
            ("GetRenderJob", "get", "/v1/renders/{job_id}", ""),
            ("GetServiceStatus", "get", "/v1/status", ""),
            ("ListRenderJobs", "get", "/v1/renders", ""),
            ("GetTemplate", "get", "/v1/templates/{template_id}", ""),
            ("ListTemplates", "get", "/v1/templates", ""),
            ("SubmitRender", "post", "/v1/renders", "*"),
            ("WatchRenderJob", "get", "/v1/renders/{job_id}/events", ""),
        ]
        .iter()
        .map(|(a, b, c, d)| ((*a).into(), (*b).into(), (*c).into(), (*d).into()))
        .collect();
        expected.sort();
        assert_eq!(rules, expected);
    }
}
