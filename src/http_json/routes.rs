//! The door's routes, read from the `google.api.http` annotations of the contract's
//! descriptors (the proto files are the one place they are written): each is a verb, a
//! path template (`/v1/renders/{job_id}:cancel`), whether the request body is the whole
//! request message (`body: "*"`), and the gRPC method it stands for (its row in
//! [`crate::grpc::methods`] says how the door answers it).

use crate::grpc::methods::Method;
use prost_reflect::{DescriptorPool, MethodDescriptor};

/// One route of the door.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub verb: http::Method,
    segments: Vec<Segment>,
    /// The custom verb after the last segment (`cancel` of `…/{job_id}:cancel`).
    custom: Option<String>,
    /// Whether the request body is the whole request message (`body: "*"`).
    pub has_body: bool,
    pub method: MethodDescriptor,
    /// The method the route stands for.
    pub rpc: Method,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// A path variable: the request field it sets.
    Field(String),
}

/// What a request path and verb found.
#[derive(Debug)]
pub(crate) enum Found<'a> {
    /// The route, with the request fields its path variables set.
    Route(&'a Route, Vec<(String, String)>),
    /// The path is a route's, but not for this verb: the verbs it has.
    OtherVerbs(Vec<http::Method>),
    Nothing,
}

/// Every route of the contract.
#[derive(Debug, Clone)]
pub(crate) struct Routes(Vec<Route>);

impl Routes {
    /// The routes of every method of `pool` that has a `google.api.http` rule.
    pub(crate) fn from_pool(pool: &DescriptorPool) -> Result<Routes, String> {
        let Some(http) = pool.get_extension_by_name("google.api.http") else {
            return Err("the descriptors have no google.api.http extension".into());
        };
        let mut routes = Vec::new();
        for service in pool.services() {
            for method in service.methods() {
                let options = method.options();
                if !options.has_extension(&http) {
                    continue;
                }
                let rule = options.get_extension(&http);
                let Some(rule) = rule.as_message() else {
                    continue;
                };
                let verbs = [
                    ("get", http::Method::GET),
                    ("post", http::Method::POST),
                    ("delete", http::Method::DELETE),
                    ("put", http::Method::PUT),
                    ("patch", http::Method::PATCH),
                ];
                let Some((verb, template)) = verbs.into_iter().find_map(|(name, verb)| {
                    let template = rule.get_field_by_name(name)?;
                    let template = template.as_str()?.to_owned();
                    (!template.is_empty()).then_some((verb, template))
                }) else {
                    return Err(format!("{}: a rule with no verb", method.full_name()));
                };
                let body = rule
                    .get_field_by_name("body")
                    .and_then(|body| body.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let (segments, custom) = parse_template(&template)
                    .ok_or_else(|| format!("{}: bad path template {template}", method.name()))?;
                let path = format!("/{}/{}", service.full_name(), method.name());
                let rpc =
                    Method::of(&path).ok_or_else(|| format!("{path}: no row in grpc::methods"))?;
                routes.push(Route {
                    verb,
                    segments,
                    custom,
                    has_body: body == "*",
                    rpc,
                    method,
                });
            }
        }
        Ok(Routes(routes))
    }

    /// No routes (the door closed).
    pub(crate) fn none() -> Routes {
        Routes(Vec::new())
    }

    /// The route `verb path` names.
    pub(crate) fn find(&self, verb: &http::Method, path: &str) -> Found<'_> {
        let mut other_verbs = Vec::new();
        for route in &self.0 {
            let Some(fields) = route.matches(path) else {
                continue;
            };
            // HEAD is GET without the body (RFC 9110 9.3.2).
            let head_of_get = verb == http::Method::HEAD && route.verb == http::Method::GET;
            if route.verb == verb || head_of_get {
                return Found::Route(route, fields);
            }
            other_verbs.push(route.verb.clone());
        }
        if other_verbs.is_empty() {
            Found::Nothing
        } else {
            Found::OtherVerbs(other_verbs)
        }
    }

    /// Every route, for the OpenAPI document.
    pub(crate) fn all(&self) -> &[Route] {
        &self.0
    }
}

impl Route {
    /// The request fields the path's variables set, if `path` is this route's.
    fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let path = path.strip_prefix('/')?;
        let path = match &self.custom {
            Some(custom) => path.strip_suffix(custom.as_str())?.strip_suffix(':')?,
            None => path,
        };
        let parts: Vec<&str> = path.split('/').collect();
        if parts.len() != self.segments.len() {
            return None;
        }
        let mut fields = Vec::new();
        for (segment, part) in self.segments.iter().zip(parts) {
            match segment {
                Segment::Literal(literal) if literal == part => {}
                Segment::Literal(_) => return None,
                // A variable matches one whole, non-empty segment; a custom verb's colon is
                // never part of it (ids are UUIDs).
                Segment::Field(_) if part.is_empty() || part.contains(':') => return None,
                Segment::Field(field) => fields.push((field.clone(), part.to_owned())),
            }
        }
        Some(fields)
    }

    /// The path template as OpenAPI writes it (`/v1/renders/{job_id}:cancel`).
    pub(crate) fn template(&self) -> String {
        let mut template = String::new();
        for segment in &self.segments {
            template.push('/');
            match segment {
                Segment::Literal(literal) => template.push_str(literal),
                Segment::Field(field) => {
                    template.push('{');
                    template.push_str(field);
                    template.push('}');
                }
            }
        }
        if let Some(custom) = &self.custom {
            template.push(':');
            template.push_str(custom);
        }
        template
    }

    /// The fields the path's variables set.
    pub(crate) fn path_fields(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Field(field) => Some(field.as_str()),
            Segment::Literal(_) => None,
        })
    }
}

/// The segments and custom verb of a template such as `/v1/renders/{job_id}:cancel` (the
/// subset of google.api.http's grammar the contract uses: literals, single-segment
/// variables, one custom verb).
fn parse_template(template: &str) -> Option<(Vec<Segment>, Option<String>)> {
    let template = template.strip_prefix('/')?;
    let (path, custom) = match template.rsplit_once(':') {
        Some((path, custom)) if !custom.contains('/') && !custom.contains('}') => {
            (path, Some(custom.to_owned()))
        }
        _ => (template, None),
    };
    let segments = path
        .split('/')
        .map(|part| match part.strip_prefix('{') {
            Some(variable) => {
                let field = variable.strip_suffix('}')?;
                let simple = !field.is_empty()
                    && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                simple.then(|| Segment::Field(field.to_owned()))
            }
            None if !part.is_empty() && !part.contains(['{', '}']) => {
                Some(Segment::Literal(part.to_owned()))
            }
            None => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((segments, custom))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Routes {
        Routes::from_pool(crate::grpc::proto::descriptor_pool().unwrap()).unwrap()
    }

    #[test]
    fn paths_find_their_method_and_fields() {
        let routes = routes();
        let id = "0b9c6b2e-4f7e-4a53-9d3e-2f1d8e0c1a55";
        let table = [
            ("POST", "/v1/renders", "SubmitRender", None),
            (
                "POST",
                "/v1/renders/ID:cancel",
                "CancelRenderJob",
                Some("job_id"),
            ),
            ("GET", "/v1/renders/ID", "GetRenderJob", Some("job_id")),
            (
                "HEAD",
                "/v1/renders/ID/output",
                "DownloadRenderOutput",
                Some("job_id"),
            ),
            (
                "DELETE",
                "/v1/templates/ID",
                "DeleteTemplate",
                Some("template_id"),
            ),
            ("GET", "/v1/templates", "ListTemplates", None),
        ];
        for (verb, path, method, field) in table {
            let verb: http::Method = verb.parse().unwrap();
            let path = path.replace("ID", id);
            let Found::Route(route, found) = routes.find(&verb, &path) else {
                panic!("{verb} {path} found nothing");
            };
            assert_eq!(route.method.name(), method, "{path}");
            let expected: Vec<(String, String)> = field
                .map(|field| (field.to_owned(), id.to_owned()))
                .into_iter()
                .collect();
            assert_eq!(found, expected, "{path}");
        }
    }

    #[test]
    fn other_paths_and_verbs_are_told_apart() {
        let routes = routes();
        for path in [
            "/v1/renders/x/y/z",
            "/v1/renders/x:stop",
            "/v1/renders//events",
            "/v2/renders",
            "/",
            "",
            "/v1/renders/a:b:cancel",
        ] {
            assert!(
                matches!(routes.find(&http::Method::GET, path), Found::Nothing),
                "{path}"
            );
        }
        match routes.find(&http::Method::PUT, "/v1/templates/abc") {
            Found::OtherVerbs(mut verbs) => {
                verbs.sort_by_key(|verb| verb.to_string());
                assert_eq!(verbs, [http::Method::DELETE, http::Method::GET]);
            }
            other => panic!("{other:?}"),
        }
        // A template is printed back as it was written.
        let templates: Vec<String> = routes.all().iter().map(Route::template).collect();
        assert!(templates.contains(&"/v1/renders/{job_id}:cancel".to_owned()));
    }
}
