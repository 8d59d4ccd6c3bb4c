//! What every console answer carries (Content-Security-Policy with no inline script and no
//! eval, no framing, nosniff, no referrer, its content type and caching), what it refuses
//! (verbs other than GET and HEAD, unknown files), that no answer sets a cookie and the API
//! takes none as a credential, and that a page of another origin is granted nothing by a
//! preflight. Real server, real sockets, a stock HTTP client.

use crate::helpers::*;
use reqwest::{Client, Method, Response, StatusCode};

const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; \
     connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const KEY: &str = "console-headers-key-0123456789";
const ELSEWHERE: &str = "https://elsewhere.example";

fn url(app: &TestApp, path: &str) -> String {
    format!("http://{}{path}", app.address)
}

fn client() -> Client {
    Client::builder()
        .http1_only()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response
        .headers()
        .get(name)
        .map(|value| value.to_str().unwrap())
}

/// The headers every console answer carries, refusals included.
fn assert_hardened(response: &Response, path: &str) {
    assert_eq!(
        header(response, "content-security-policy"),
        Some(CONTENT_SECURITY_POLICY),
        "{path}"
    );
    assert_eq!(header(response, "x-frame-options"), Some("DENY"), "{path}");
    assert_eq!(
        header(response, "x-content-type-options"),
        Some("nosniff"),
        "{path}"
    );
    assert_eq!(
        header(response, "referrer-policy"),
        Some("no-referrer"),
        "{path}"
    );
    assert_eq!(
        header(response, "cache-control"),
        Some("no-cache"),
        "{path}"
    );
    assert!(
        response.headers().get("set-cookie").is_none(),
        "{path} sets no cookie"
    );
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "{path} grants no other origin"
    );
}

/// The console's files: the page, and every file it names (scripts, styles), and every module
/// those import, found by reading them as a browser would follow them.
async fn console_files(client: &Client, app: &TestApp) -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(name) = pending.pop() {
        if files.iter().any(|(known, _, _)| *known == name) {
            continue;
        }
        let response = client
            .get(url(app, &format!("/console/{name}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "/console/{name}");
        assert_hardened(&response, &name);
        let content_type = header(&response, "content-type").unwrap().to_owned();
        let text = response.text().await.unwrap();
        for quote in ["src=\"", "href=\"", "from './"] {
            for (start, _) in text.match_indices(quote) {
                let rest = &text[start + quote.len()..];
                let end = rest.find(['"', '\'']).unwrap();
                let named = &rest[..end];
                if named.ends_with(".js") || named.ends_with(".css") {
                    pending.push(named.to_owned());
                }
            }
        }
        files.push((name, content_type, text));
    }
    files
}

#[tokio::test]
async fn every_console_file_carries_its_type_and_the_security_headers_and_needs_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with_keys(dir.path(), &[("acme", "alice", KEY)], |_| {}).await;
    let client = client();
    let files = console_files(&client, &app).await;
    let names: Vec<&str> = files.iter().map(|(name, _, _)| name.as_str()).collect();
    for expected in [
        "",
        "app.js",
        "api.js",
        "jobs.js",
        "templates.js",
        "try.js",
        "instance.js",
        "console.css",
    ] {
        assert!(names.contains(&expected), "{expected:?} in {names:?}");
    }
    for (name, content_type, _) in &files {
        let expected = if name.is_empty() {
            "text/html; charset=utf-8"
        } else if name.ends_with(".js") {
            "text/javascript; charset=utf-8"
        } else {
            "text/css; charset=utf-8"
        };
        assert_eq!(content_type, expected, "{name}");
    }
    // HEAD: the same headers, no body; a current copy is not sent again.
    let head = client.head(url(&app, "/console/")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_hardened(&head, "HEAD /console/");
    let etag = header(&head, "etag").unwrap().to_owned();
    let again = client
        .get(url(&app, "/console/"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_hardened(&again, "304 /console/");
    // The folder without its slash is sent to the page.
    let bare = client.get(url(&app, "/console")).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(header(&bare, "location"), Some("/console/"));
    assert_hardened(&bare, "/console");
    // The API itself still wants the key.
    let api = client.get(url(&app, "/v1/templates")).send().await.unwrap();
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
}

#[tokio::test]
async fn writes_to_the_console_are_405_and_an_unknown_file_is_a_404_problem() {
    let app = spawn_app().await;
    let client = client();
    for method in [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
    ] {
        for path in ["/console/", "/console/app.js", "/console"] {
            let response = client
                .request(method.clone(), url(&app, path))
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(
                header(&response, "allow"),
                Some("GET, HEAD"),
                "{method} {path}"
            );
            assert_hardened(&response, path);
            assert_eq!(
                header(&response, "content-type"),
                Some("application/problem+json")
            );
            let problem: serde_json::Value = response.json().await.unwrap();
            assert_eq!(problem["reason"], "METHOD_NOT_ALLOWED");
        }
    }
    for path in [
        "/console/missing.js",
        "/console/..%2fopenapi.json",
        "/console/index.html/x",
    ] {
        let response = client.get(url(&app, path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert_hardened(&response, path);
        let problem: serde_json::Value = response.json().await.unwrap();
        assert_eq!(problem["reason"], "ROUTE_NOT_FOUND", "{path}");
        assert_eq!(problem["status"], 404);
    }
    app.stop().await;
}

/// Whether `tag` (the text between `<` and `>`) has an attribute named `on…` (an event
/// handler written in the markup).
fn has_handler_attribute(tag: &str) -> bool {
    tag.split(|c: char| c.is_whitespace() || c == '/')
        .skip(1)
        .any(|attribute| attribute.to_ascii_lowercase().starts_with("on"))
}

#[tokio::test]
async fn the_page_has_no_inline_script_and_its_modules_parse_no_string_as_html_or_code() {
    let app = spawn_app().await;
    let files = console_files(&client(), &app).await;
    let (_, _, page) = files.iter().find(|(name, _, _)| name.is_empty()).unwrap();
    let mut scripts = 0;
    for tag in page
        .split('<')
        .skip(1)
        .map(|rest| &rest[..rest.find('>').unwrap()])
    {
        let name = tag
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if name == "script" {
            scripts += 1;
            assert!(tag.contains(" src=\""), "a script without src: <{tag}>");
        }
        assert!(
            !has_handler_attribute(tag),
            "an event handler attribute: <{tag}>"
        );
        assert!(!tag.contains("javascript:"), "a javascript: URL: <{tag}>");
        assert!(!tag.contains("style=\""), "an inline style: <{tag}>");
    }
    assert_eq!(scripts, 1, "one module, app.js, loads the others");
    assert!(!page.contains("<style"), "no inline stylesheet");
    // The modules build the page with createElement and text nodes only.
    for (name, _, text) in files.iter().filter(|(name, _, _)| name.ends_with(".js")) {
        for call in [
            ".innerHTML",
            ".outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "DOMParser",
            "createContextualFragment",
        ] {
            assert!(!text.contains(call), "{name} uses {call}");
        }
        assert!(!text.contains("document.cookie"), "{name} touches cookies");
        assert!(
            !text.contains("localStorage"),
            "{name} keeps the key past the tab"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn another_origin_is_granted_nothing_and_a_cookie_is_no_credential() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with_keys(dir.path(), &[("acme", "alice", KEY)], |_| {}).await;
    let client = client();
    // A preflight from a page elsewhere, asking to send the key: no route takes OPTIONS, and
    // nothing grants the origin (so the browser sends nothing).
    for path in [
        "/v1/renders",
        "/v1/templates",
        "/v1/status",
        "/v1/renders/00000000-0000-0000-0000-000000000000:cancel",
    ] {
        let preflight = client
            .request(Method::OPTIONS, url(&app, path))
            .header("origin", ELSEWHERE)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type, idempotency-key",
            )
            .send()
            .await
            .unwrap();
        assert!(!preflight.status().is_success(), "{path}: {preflight:?}");
        for granted in [
            "access-control-allow-origin",
            "access-control-allow-credentials",
            "access-control-allow-headers",
            "access-control-allow-methods",
        ] {
            assert!(
                preflight.headers().get(granted).is_none(),
                "{path}: {granted}"
            );
        }
    }
    // A simple request from elsewhere with the key (as a page could make with a stolen key)
    // is answered without granting the origin: the page cannot read the answer.
    let simple = client
        .get(url(&app, "/v1/templates"))
        .header("origin", ELSEWHERE)
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(simple.status(), StatusCode::OK);
    assert!(simple
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    // The key in a cookie is no credential: only the authorization header is read.
    for cookie in [
        format!("authorization=Bearer {KEY}"),
        format!("key={KEY}; api_key={KEY}; lottie-render-api-key={KEY}"),
    ] {
        let response = client
            .get(url(&app, "/v1/templates"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers().get("set-cookie").is_none());
    }
    // And no answer of the API sets one either.
    let templates = client
        .get(url(&app, "/v1/templates"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert!(templates.headers().get("set-cookie").is_none());
    app.stop().await;
}
