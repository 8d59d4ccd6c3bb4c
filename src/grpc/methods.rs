//! Every RPC this server answers, one row each: its path and what each layer of the stack
//! needs to know of it (the kind of its request body, its Idempotency-Key rule, the cap its
//! streams count against, how the HTTP/JSON door answers it, its message types, the names its
//! metrics and spans carry). A layer asks [`Method::of`] with the call's path instead of
//! matching paths of its own; a path that is no row is no method of ours, and each layer
//! treats it as it always did (its body is not read, its metric label is `unknown`, …).
//!
//! The table is held against the descriptor sets (ours, health's, reflection's) by a test:
//! every method of those services has exactly one row, every row is a real method with the
//! message types it names. So a new RPC in `proto/` fails that test until it has its row,
//! and a row's new kind of body or stream cap fails to compile until the layer that owns
//! that kind (`middleware::request_body`, `middleware::stream_limit`) says what it means.
//!
//! What the table does not hold, and why: the limits and pools of each body kind belong to
//! `middleware::request_body`, which owns them (the table names the kind); the door's routes
//! are the `google.api.http` annotations in `proto/` (read by `http_json::routes`), so a
//! mesh's transcoder serves the same paths; the Idempotency-Key's scope of each keyed use
//! case is spelt by the use case (`jobs::intake`, `templates`), which does not know the wire.

use http::StatusCode;

/// Declares [`Method`] and its properties from one table, so that a method's path and what
/// the layers do with it cannot drift apart. Rows are grouped by service (its full name);
/// each row is `Variant => "MethodName" { columns }`.
macro_rules! methods {
    ($(
        $service:literal {
            $($variant:ident => $name:literal {
                request: $request:literal,
                response: $response:literal,
                body: $body:ident,
                key: $key:ident,
                watch: $watch:expr,
                door: $door:expr,
                raw_upload: $raw_upload:expr $(,)?
            },)+
        }
    )+) => {
        /// One RPC of this server (ours, health's, reflection's).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Method {
            $($($variant,)+)+
        }

        impl Method {
            /// Every method, for checks over the whole table.
            pub const ALL: &'static [Method] = &[$($(Method::$variant,)+)+];

            /// The method at `path` (`/package.Service/Method`); `None` for any other path.
            pub fn of(path: &str) -> Option<Method> {
                match path {
                    $($(concat!("/", $service, "/", $name) => Some(Method::$variant),)+)+
                    _ => None,
                }
            }

            /// Its gRPC path, `/package.Service/Method`.
            pub const fn path(self) -> &'static str {
                match self {
                    $($(Method::$variant => concat!("/", $service, "/", $name),)+)+
                }
            }

            /// Its service's full name (a span's `rpc.service`).
            pub const fn service(self) -> &'static str {
                match self {
                    $($(Method::$variant => $service,)+)+
                }
            }

            /// Its name in its service (a span's `rpc.method`, the metrics' `method` label).
            pub const fn name(self) -> &'static str {
                match self {
                    $($(Method::$variant => $name,)+)+
                }
            }

            /// The full name of its request message.
            pub const fn request(self) -> &'static str {
                match self {
                    $($(Method::$variant => $request,)+)+
                }
            }

            /// The full name of its response message.
            pub const fn response(self) -> &'static str {
                match self {
                    $($(Method::$variant => $response,)+)+
                }
            }

            /// What its request body is, for `middleware::request_body`.
            pub const fn body(self) -> RequestKind {
                match self {
                    $($(Method::$variant => RequestKind::$body,)+)+
                }
            }

            /// Whether it takes an `idempotency-key`.
            pub const fn key(self) -> KeyRule {
                match self {
                    $($(Method::$variant => KeyRule::$key,)+)+
                }
            }

            /// The cap its open streams count against (`None`: not capped by the stack).
            pub const fn watch(self) -> Option<StreamCap> {
                match self {
                    $($(Method::$variant => $watch,)+)+
                }
            }

            /// How the HTTP/JSON door answers it (`None`: it has no route).
            pub const fn door(self) -> Option<DoorAnswer> {
                match self {
                    $($(Method::$variant => $door,)+)+
                }
            }

            /// The `bytes` field a raw upload's body fills, on the door (`POST /v1/templates?name=…`
            /// with the Lottie file as the body); `None`: its body is always JSON.
            pub const fn raw_upload(self) -> Option<&'static str> {
                match self {
                    $($(Method::$variant => $raw_upload,)+)+
                }
            }
        }
    };
}

/// What a method's request body is: `middleware::request_body` gives each kind its limit
/// and the pool its bytes are buffered from (an exhaustive match, so a new kind is placed
/// there before it compiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A health probe's service name.
    Probe,
    /// One template, job or image id, a list page (with its filters), or nothing.
    IdOnly,
    /// A template and its fonts.
    Template,
    /// A render request: its fields and its replacement images.
    Render,
    /// One image.
    Image,
    /// A stream of messages (reflection), passed through as it comes.
    Stream,
}

/// Whether a method takes an `idempotency-key` (`middleware::idempotency_key` checks it from
/// the headers; the handler claims it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// Not looked at.
    Ignored,
    /// Checked when given (a malformed one is refused).
    Optional,
    /// Refused without a well-formed one.
    Required,
}

/// The caps on streams open at once (`middleware::stream_limit` holds the slots of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCap {
    /// WatchRenderJob: its callers are the tenants.
    RenderWatchers,
    /// Health's Watch: open to anyone who can connect, so apart from the tenants' cap.
    HealthWatchers,
}

/// How the HTTP/JSON door gives a successful answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorAnswer {
    /// The message as JSON, 200.
    Json,
    /// The message as JSON with `status` and `Location`: `location_prefix` and the answer's
    /// field `id_field` that names what the call created (`/v1/templates/` + `templateId`).
    Created {
        status: StatusCode,
        location_prefix: &'static str,
        id_field: &'static str,
    },
    /// The stream as Server-Sent Events.
    Events,
    /// The output file itself (ranges, `HEAD`).
    File,
}

methods! {
    "lottie.render.v1.TemplateService" {
        CreateTemplate => "CreateTemplate" {
            request: "lottie.render.v1.CreateTemplateRequest",
            response: "lottie.render.v1.Template",
            body: Template,
            key: Optional,
            watch: None,
            door: Some(DoorAnswer::Created {
                status: StatusCode::CREATED,
                location_prefix: "/v1/templates/",
                id_field: "templateId",
            }),
            raw_upload: Some("lottie_json"),
        },
        GetTemplate => "GetTemplate" {
            request: "lottie.render.v1.GetTemplateRequest",
            response: "lottie.render.v1.Template",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        ListTemplates => "ListTemplates" {
            request: "lottie.render.v1.ListTemplatesRequest",
            response: "lottie.render.v1.ListTemplatesResponse",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        DeleteTemplate => "DeleteTemplate" {
            request: "lottie.render.v1.DeleteTemplateRequest",
            response: "google.protobuf.Empty",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        UploadImage => "UploadImage" {
            request: "lottie.render.v1.UploadImageRequest",
            response: "lottie.render.v1.Image",
            body: Image, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        DeleteImage => "DeleteImage" {
            request: "lottie.render.v1.DeleteImageRequest",
            response: "google.protobuf.Empty",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
    }
    "lottie.render.v1.RenderService" {
        SubmitRender => "SubmitRender" {
            request: "lottie.render.v1.RenderRequest",
            response: "lottie.render.v1.RenderJob",
            body: Render,
            key: Required,
            watch: None,
            door: Some(DoorAnswer::Created {
                status: StatusCode::ACCEPTED,
                location_prefix: "/v1/renders/",
                id_field: "jobId",
            }),
            raw_upload: None,
        },
        GetRenderJob => "GetRenderJob" {
            request: "lottie.render.v1.GetRenderJobRequest",
            response: "lottie.render.v1.RenderJob",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        WatchRenderJob => "WatchRenderJob" {
            request: "lottie.render.v1.WatchRenderJobRequest",
            response: "lottie.render.v1.RenderJob",
            body: IdOnly,
            key: Ignored,
            watch: Some(StreamCap::RenderWatchers),
            door: Some(DoorAnswer::Events),
            raw_upload: None,
        },
        CancelRenderJob => "CancelRenderJob" {
            request: "lottie.render.v1.CancelRenderJobRequest",
            response: "lottie.render.v1.RenderJob",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        // Its streams are capped by the download slots of its handler
        // (`grpc::renders::download`), which also see a stalled reader.
        DownloadRenderOutput => "DownloadRenderOutput" {
            request: "lottie.render.v1.DownloadRenderOutputRequest",
            response: "lottie.render.v1.OutputChunk",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::File), raw_upload: None,
        },
        ListRenderJobs => "ListRenderJobs" {
            request: "lottie.render.v1.ListRenderJobsRequest",
            response: "lottie.render.v1.ListRenderJobsResponse",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
        GetServiceStatus => "GetServiceStatus" {
            request: "lottie.render.v1.GetServiceStatusRequest",
            response: "lottie.render.v1.ServiceStatus",
            body: IdOnly, key: Ignored, watch: None, door: Some(DoorAnswer::Json), raw_upload: None,
        },
    }
    "grpc.health.v1.Health" {
        HealthCheck => "Check" {
            request: "grpc.health.v1.HealthCheckRequest",
            response: "grpc.health.v1.HealthCheckResponse",
            body: Probe, key: Ignored, watch: None, door: None, raw_upload: None,
        },
        HealthWatch => "Watch" {
            request: "grpc.health.v1.HealthCheckRequest",
            response: "grpc.health.v1.HealthCheckResponse",
            body: Probe,
            key: Ignored,
            watch: Some(StreamCap::HealthWatchers),
            door: None,
            raw_upload: None,
        },
    }
    "grpc.reflection.v1.ServerReflection" {
        ReflectionInfo => "ServerReflectionInfo" {
            request: "grpc.reflection.v1.ServerReflectionRequest",
            response: "grpc.reflection.v1.ServerReflectionResponse",
            body: Stream, key: Ignored, watch: None, door: None, raw_upload: None,
        },
    }
    "grpc.reflection.v1alpha.ServerReflection" {
        ReflectionInfoV1Alpha => "ServerReflectionInfo" {
            request: "grpc.reflection.v1alpha.ServerReflectionRequest",
            response: "grpc.reflection.v1alpha.ServerReflectionResponse",
            body: Stream, key: Ignored, watch: None, door: None, raw_upload: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::{DescriptorPool, MethodDescriptor};

    /// The descriptor sets of the services this server serves, in one pool.
    fn served_pool() -> DescriptorPool {
        let sets = [
            crate::grpc::proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ];
        let mut pool = DescriptorPool::new();
        for set in sets {
            // Decoded by the pool itself, which keeps the options' extensions (google.api.http).
            pool.decode_file_descriptor_set(set).unwrap();
        }
        pool
    }

    /// Every method of the services this server serves.
    fn served_methods() -> Vec<MethodDescriptor> {
        served_pool()
            .services()
            .flat_map(|service| service.methods().collect::<Vec<_>>())
            .collect()
    }

    fn path_of(method: &MethodDescriptor) -> String {
        format!("/{}/{}", method.parent_service().full_name(), method.name())
    }

    #[test]
    fn every_served_method_has_exactly_one_row_and_every_row_is_a_served_method() {
        let methods = served_methods();
        assert!(methods.len() >= 15, "{} methods", methods.len());
        for descriptor in &methods {
            let path = path_of(descriptor);
            let rows: Vec<&Method> = Method::ALL
                .iter()
                .filter(|row| row.path() == path)
                .collect();
            assert_eq!(rows.len(), 1, "{path}: add its row to grpc::methods");
            assert_eq!(Method::of(&path), Some(*rows[0]), "{path}");
        }
        for row in Method::ALL {
            assert!(
                methods.iter().any(|d| path_of(d) == row.path()),
                "{row:?} ({}) is no method of the descriptor sets",
                row.path()
            );
            assert_eq!(
                row.path(),
                format!("/{}/{}", row.service(), row.name()),
                "{row:?}"
            );
        }
    }

    #[test]
    fn each_row_says_what_its_descriptor_says() {
        let pool = served_pool();
        let http = pool.get_extension_by_name("google.api.http").unwrap();
        for descriptor in pool
            .services()
            .flat_map(|service| service.methods().collect::<Vec<_>>())
        {
            let path = path_of(&descriptor);
            let method = Method::of(&path).unwrap_or_else(|| panic!("{path} has no row"));
            assert_eq!(method.request(), descriptor.input().full_name(), "{path}");
            assert_eq!(method.response(), descriptor.output().full_name(), "{path}");
            // Only reflection's requests are streams, passed through unbuffered.
            assert_eq!(
                method.body() == RequestKind::Stream,
                descriptor.is_client_streaming(),
                "{path}"
            );
            if method.watch().is_some() {
                assert!(descriptor.is_server_streaming(), "{path}");
            }
            // A door answer for exactly the methods with a route, in the shape of the method.
            let has_route = descriptor.options().has_extension(&http);
            assert_eq!(method.door().is_some(), has_route, "{path}");
            if let Some(answer) = method.door() {
                let streams = matches!(answer, DoorAnswer::Events | DoorAnswer::File);
                assert_eq!(streams, descriptor.is_server_streaming(), "{path}");
            }
            if let Some(field) = method.raw_upload() {
                let field = descriptor.input().get_field_by_name(field);
                let kind = field.map(|field| field.kind());
                assert_eq!(kind, Some(prost_reflect::Kind::Bytes), "{path}");
            }
        }
    }

    #[test]
    fn other_paths_are_no_method() {
        for path in [
            "",
            "/",
            "/lottie.render.v1.RenderService/NoSuchMethod",
            "/lottie.render.v1.RenderService/SubmitRender/x",
            "/grpc.health.v1.Health/SubmitRender",
            "/evil/GetTemplate",
            "lottie.render.v1.RenderService/SubmitRender",
        ] {
            assert_eq!(Method::of(path), None, "{path}");
        }
    }
}
