//! The web console (docs/console.md): a small page in the browser, served by the HTTP/JSON
//! door at `/console/` on the service's own port, whose only API is that door (`/v1/...`).
//! Its files (hand-written HTML, ES modules and CSS under `assets/console/`) are compiled into
//! the binary, so it works offline and cannot differ from the server it came with.
//!
//! They are not secret: no identity is needed to load them, and they hold none. Every API
//! call the page makes carries the caller's key (`authorization: Bearer KEY`, typed in and kept
//! in the tab's sessionStorage), never a cookie, so no request a browser makes on its own
//! carries a credential and cross-site request forgery has nothing to ride on. Every answer
//! here carries the same hardening headers ([`harden`]): a Content-Security-Policy that allows
//! only the console's own scripts (no inline script, no eval, no framing), `nosniff`, no
//! referrer. Only GET and HEAD: nothing here changes state.

use crate::error::ServiceError;
use crate::lottie::reading::template::hex_sha256;
use crate::reason::Reason;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;
use std::sync::OnceLock;
use tonic::body::Body;

/// Where the console is served: its page, and its files beside it.
pub(crate) const CONSOLE_PATH: &str = "/console/";

/// The policy of every console answer: scripts and styles only from the console's own
/// files (no inline script or style, no eval), pictures and videos also from the `blob:`
/// URLs the page makes of outputs it fetched, API calls only to this origin, never framed
/// (clickjacking), no `<base>` and no form posting anywhere.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; \
     connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The files may change with every release of the binary and are small: a browser asks
/// again each time and is answered 304 when its copy (by ETag) is current.
const CACHE_CONTROL: &str = "no-cache";

/// One file of the console.
struct Asset {
    /// Its name under [`CONSOLE_PATH`] (empty: the page itself).
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

macro_rules! assets {
    ($(($name:literal, $file:literal, $type:expr)),* $(,)?) => {
        &[$(Asset {
            name: $name,
            content_type: $type,
            bytes: include_bytes!(concat!("../assets/console/", $file)),
        }),*]
    };
}

/// Every file of the console; anything else under [`CONSOLE_PATH`] is 404.
const ASSETS: &[Asset] = assets![
    ("", "index.html", HTML),
    ("console.css", "console.css", CSS),
    ("app.js", "app.js", JAVASCRIPT),
    ("api.js", "api.js", JAVASCRIPT),
    ("dom.js", "dom.js", JAVASCRIPT),
    ("jobs.js", "jobs.js", JAVASCRIPT),
    ("templates.js", "templates.js", JAVASCRIPT),
    ("try.js", "try.js", JAVASCRIPT),
    ("slots.js", "slots.js", JAVASCRIPT),
    ("instance.js", "instance.js", JAVASCRIPT),
];

/// Each file's ETag (its SHA-256, quoted), in [`ASSETS`]' order, computed once.
fn etags() -> &'static [HeaderValue] {
    static ETAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|asset| {
                HeaderValue::from_str(&format!("\"{}\"", hex_sha256(asset.bytes)))
                    .unwrap_or_else(|_| HeaderValue::from_static("\"\""))
            })
            .collect()
    })
}

/// The console's answer to a request for `path`, `None` when the path is not the console's.
/// A refusal (unknown file, a verb other than GET or HEAD) is an error the door writes as
/// its problem document; either way the door then [`harden`]s the answer.
pub(crate) fn answer(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Option<Result<Response<Body>, ServiceError>> {
    let name = match path.strip_prefix(CONSOLE_PATH) {
        Some(name) => name,
        None if path == CONSOLE_PATH.trim_end_matches('/') => {
            return Some(allowed(method).map(|()| redirect_to_page()));
        }
        None => return None,
    };
    Some(allowed(method).and_then(|()| file(name, method == Method::HEAD, headers)))
}

/// GET and HEAD only: the console's files are read, never written.
fn allowed(method: &Method) -> Result<(), ServiceError> {
    if matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    Err(ServiceError::invalid_argument(
        Reason::MethodNotAllowed,
        format!("{method} is not a method of the console; it allows GET, HEAD"),
        Vec::new(),
    ))
}

fn file(name: &str, head_only: bool, headers: &HeaderMap) -> Result<Response<Body>, ServiceError> {
    let Some(index) = ASSETS.iter().position(|asset| asset.name == name) else {
        return Err(ServiceError::not_found(
            Reason::RouteNotFound,
            format!("the console has no file {name:?}"),
        ));
    };
    let asset = &ASSETS[index];
    let etag = etags().get(index).cloned();
    let fresh = match (&etag, headers.get(http::header::IF_NONE_MATCH)) {
        (Some(etag), Some(asked)) => asked
            .to_str()
            .is_ok_and(|asked| asked.split(',').any(|tag| tag.trim() == etag)),
        _ => false,
    };
    let body = if head_only || fresh {
        Bytes::new()
    } else {
        Bytes::from_static(asset.bytes)
    };
    let mut answer = Response::new(Body::new(Full::new(body)));
    if fresh {
        *answer.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let headers = answer.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    if !fresh {
        headers.insert(http::header::CONTENT_LENGTH, asset.bytes.len().into());
    }
    if let Some(etag) = etag {
        headers.insert(http::header::ETAG, etag);
    }
    Ok(answer)
}

/// `/console` is the page's folder without its slash: the page's relative links need it.
fn redirect_to_page() -> Response<Body> {
    let mut answer = Response::new(Body::new(Full::new(Bytes::new())));
    *answer.status_mut() = StatusCode::PERMANENT_REDIRECT;
    answer.headers_mut().insert(
        http::header::LOCATION,
        HeaderValue::from_static(CONSOLE_PATH),
    );
    answer
}

/// `answer` with the headers every console answer carries, refusals included (module head:
/// why each), and the verbs a 405 names.
pub(crate) fn harden(mut answer: Response<Body>) -> Response<Body> {
    if answer.status() == StatusCode::METHOD_NOT_ALLOWED {
        answer
            .headers_mut()
            .insert(http::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    let headers = answer.headers_mut();
    for (name, value) in [
        (
            http::header::CONTENT_SECURITY_POLICY,
            CONTENT_SECURITY_POLICY,
        ),
        (http::header::X_FRAME_OPTIONS, "DENY"),
        (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (http::header::REFERRER_POLICY, "no-referrer"),
        (http::header::CACHE_CONTROL, CACHE_CONTROL),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_answered_with_its_type_and_anything_else_is_not_found() {
        for asset in ASSETS {
            let path = format!("{CONSOLE_PATH}{}", asset.name);
            let answer = answer(&Method::GET, &path, &HeaderMap::new())
                .unwrap()
                .unwrap();
            assert_eq!(answer.status(), StatusCode::OK, "{path}");
            assert_eq!(answer.headers()["content-type"], asset.content_type);
        }
        let missing = answer(&Method::GET, "/console/../openapi.json", &HeaderMap::new());
        assert!(matches!(missing, Some(Err(_))));
        assert!(answer(&Method::GET, "/v1/templates", &HeaderMap::new()).is_none());
        assert!(answer(&Method::GET, "/consolex", &HeaderMap::new()).is_none());
    }

    #[test]
    fn a_current_copy_is_answered_not_modified_and_writes_are_refused() {
        let page = answer(&Method::GET, CONSOLE_PATH, &HeaderMap::new())
            .unwrap()
            .unwrap();
        let mut asked = HeaderMap::new();
        asked.insert(http::header::IF_NONE_MATCH, page.headers()["etag"].clone());
        let again = answer(&Method::GET, CONSOLE_PATH, &asked).unwrap().unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        let post = answer(&Method::POST, CONSOLE_PATH, &HeaderMap::new()).unwrap();
        assert!(post.is_err());
    }
}
