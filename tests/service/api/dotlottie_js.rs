//! dotLottie archives written by LottieFiles' own library, `@dotlottie/dotlottie-js` (from the
//! npm registry; `./dev test` installs it into `tools/dotlottie/node_modules`), not by us: each
//! test packs its archive in its set-up (`tools/dotlottie/pack.mjs`) from JSON it states, and
//! checks what the service makes of it over the real gRPC stack: the same frames as the JSON,
//! its theme's colours, its fonts, its images, and each of its animations by id.

use crate::helpers::*;
use base64::Engine;
use lottie_render::grpc::proto;
use std::io::Write;
use std::path::Path;

const BALL: &str = "slots-ball-colors-opacity.json";
const TEXT: &str = "slots-text-document-sid.json";

/// The archive dotlottie-js packs of `spec` (`{"version", "animations": [{"id", "data"}],
/// "themes": [{"id", "data"}]}`, as `pack.mjs` reads it).
pub(crate) fn dotlottie_js(spec: serde_json::Value) -> Vec<u8> {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/dotlottie");
    assert!(
        tool.join("node_modules/@dotlottie/dotlottie-js").is_dir(),
        "@dotlottie/dotlottie-js is not installed in {}: `./dev test` installs it",
        tool.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("packed.lottie");
    let mut child = std::process::Command::new("node")
        .arg(tool.join("pack.mjs"))
        .arg(&out)
        .current_dir(&tool)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("node (./dev test installs Node.js)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&spec).unwrap())
        .unwrap();
    assert!(child.wait().unwrap().success(), "pack.mjs failed");
    std::fs::read(out).unwrap()
}

/// A 100×100, 5-frame template whose one layer shows image asset `asset` (id `img`) at the
/// origin, unscaled.
pub(crate) fn image_layer_template(asset: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 100, "h": 100,
        "assets": [asset],
        "layers": [{"ddd": 0, "ind": 1, "ty": 2, "refId": "img", "sr": 1, "ip": 0, "op": 5,
            "st": 0, "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
            "p": {"a": 0, "k": [0, 0, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
            "s": {"a": 0, "k": [100, 100, 100]}}}]
    })
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&corpus(name)).unwrap()
}

/// The names of the archive's entries, as a zip reader other than ours (Python's) lists them.
fn entry_names(archive: &[u8]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.zip");
    std::fs::write(&path, archive).unwrap();
    let listed = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
        ])
        .arg(&path)
        .output()
        .unwrap();
    String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn create_choosing(
    app: &TestApp,
    lottie: Vec<u8>,
    animation_id: &str,
    fonts: std::collections::HashMap<String, Vec<u8>>,
) -> Result<proto::Template, tonic::Status> {
    app.templates()
        .create_template(proto::CreateTemplateRequest {
            name: "packed".into(),
            lottie_json: lottie.into(),
            fonts: fonts.into_iter().map(|(k, v)| (k, v.into())).collect(),
            animation_id: animation_id.into(),
        })
        .await
        .map(tonic::Response::into_inner)
}

fn sha(job: proto::RenderJob) -> String {
    job.output.unwrap().sha256
}

/// Versions 1 and 2 render as their JSON; version 2's theme is the colour it lists under the
/// request's own (its rules for no slot, keyframed and for an image are left out, each said
/// in a warning), and an unknown theme is refused naming `theme`.
#[tokio::test]
async fn a_dotlottie_js_archive_renders_as_its_json_and_its_theme_recolours() {
    let app = spawn_app().await;
    let ball = json(BALL);
    let dark = serde_json::json!({"rules": [
        {"id": "ball_color", "type": "Color", "value": [0, 0, 1, 1]},
        {"id": "no_such_slot", "type": "Color", "value": [1, 1, 1]},
        {"id": "ball_color", "type": "Color", "keyframes": [{"frame": 0, "value": [1, 0, 0]}]},
        {"id": "ball_image", "type": "Image", "value": {"src": "/i/other.png"}}
    ]});
    let v2 = dotlottie_js(serde_json::json!({"version": 2,
        "animations": [{"id": "ball", "data": ball}], "themes": [{"id": "dark", "data": dark}]}));
    let v1 = dotlottie_js(serde_json::json!({"version": 1,
        "animations": [{"id": "ball", "data": ball}]}));
    assert!(entry_names(&v2).contains(&"t/dark.json".to_owned()));
    assert!(entry_names(&v1).contains(&"animations/ball.json".to_owned()));
    let plain = app.create("ball.json", corpus(BALL)).await.unwrap();
    let render = |template: &proto::Template, theme: &str, colors: Vec<(&str, proto::Color)>| {
        let mut request = small_request(&template.template_id, proto::Format::Gif);
        request.theme = theme.into();
        request.modifications = Some(proto::Modifications {
            colors: colors
                .into_iter()
                .map(|(slot, color)| (slot.to_owned(), color))
                .collect(),
            ..Default::default()
        });
        let app = &app;
        async move { sha(app.render(request).await) }
    };
    let as_json = render(&plain, "", Vec::new()).await;
    for (version, archive) in [("1", v1), ("2", v2.clone())] {
        let packed = app.create("ball.lottie", archive).await.unwrap();
        assert_eq!(packed.color_slots, plain.color_slots, "version {version}");
        assert_eq!(packed.animations, ["ball"], "version {version}");
        assert_eq!(
            render(&packed, "", Vec::new()).await,
            as_json,
            "version {version} renders as its JSON"
        );
    }
    let themed = app.create("themed.lottie", v2).await.unwrap();
    assert_eq!(themed.themes, ["dark"]);
    for left_out in [
        "Color rule 'ball_color' (keyframed)",
        "Image rule 'ball_image'",
        "no colour slot 'no_such_slot'",
    ] {
        assert!(
            themed
                .warnings
                .iter()
                .any(|warning| warning.starts_with("theme 'dark'") && warning.contains(left_out)),
            "{left_out}: {:?}",
            themed.warnings
        );
    }
    // The rule's fourth channel is an alpha of 1, as a request's `a` sets it.
    let opaque = |r, g, b| proto::Color {
        a: Some(1.0),
        ..color(r, g, b)
    };
    let in_theme = render(&themed, "dark", Vec::new()).await;
    assert_eq!(
        in_theme,
        render(&plain, "", vec![("ball_color", opaque(0.0, 0.0, 1.0))]).await,
        "the theme is the colour it lists"
    );
    assert_ne!(in_theme, as_json, "the theme changed the ball");
    let green = vec![("ball_color", opaque(0.0, 1.0, 0.0))];
    assert_eq!(
        render(&themed, "dark", green.clone()).await,
        render(&plain, "", green).await,
        "the request's own value wins over the theme's"
    );
    let mut unknown = small_request(&themed.template_id, proto::Format::Gif);
    unknown.theme = "light".into();
    let status = app.submit(unknown).await.unwrap_err();
    assert_eq!(reason(&status), "THEME_UNKNOWN", "{status:?}");
    assert_eq!(violated_fields(&status), ["theme"], "{status:?}");
    app.stop().await;
}

/// A font embedded in the animation (a data URL), which dotlottie-js moves into the archive
/// (`f/`), is the template's font: the text renders as with the same font uploaded, where
/// the JSON alone falls back to a bundled face (and says so); a theme's text rule is that
/// text.
#[tokio::test]
async fn a_font_in_a_dotlottie_js_archive_is_the_templates_font() {
    let app = spawn_app().await;
    // DejaVu Serif (fonts-dejavu-core, which ./dev installs) for the template's "Ubuntu".
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf").unwrap();
    let mut text = json(TEXT);
    text["fonts"]["list"][0]["fPath"] = format!(
        "data:font/ttf;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&font)
    )
    .into();
    let greeting = serde_json::json!({"rules": [
        {"id": "text_doc", "type": "Text", "value": {"text": "Themed", "fontSize": 99}}]});
    let archive = dotlottie_js(serde_json::json!({"version": 2,
        "animations": [{"id": "title", "data": text}],
        "themes": [{"id": "greeting", "data": greeting}]}));
    let names = entry_names(&archive);
    assert!(
        names.iter().any(|name| name.starts_with("f/")),
        "dotlottie-js keeps the font in f/: {names:?}"
    );
    let packed = create_choosing(&app, archive, "", Default::default())
        .await
        .unwrap();
    let uploaded = create_choosing(&app, corpus(TEXT), "", [("Ubuntu".to_owned(), font)].into())
        .await
        .unwrap();
    let fallback = create_choosing(&app, corpus(TEXT), "", Default::default())
        .await
        .unwrap();
    let falls_back = |template: &proto::Template| {
        template
            .warnings
            .iter()
            .any(|warning| warning.contains("was not uploaded"))
    };
    assert!(falls_back(&fallback), "{:?}", fallback.warnings);
    assert!(!falls_back(&packed), "{:?}", packed.warnings);
    let render = |template: &proto::Template, theme: &str, text: Option<&str>| {
        let mut request = small_request(&template.template_id, proto::Format::Gif);
        request.theme = theme.into();
        request.modifications = Some(proto::Modifications {
            texts: text
                .map(|text| [("text_doc".to_owned(), text.to_owned())].into())
                .unwrap_or_default(),
            ..Default::default()
        });
        let app = &app;
        async move { sha(app.render(request).await) }
    };
    let in_packed = render(&packed, "", Some("Packed")).await;
    assert_eq!(
        in_packed,
        render(&uploaded, "", Some("Packed")).await,
        "the archive's font is used"
    );
    assert_ne!(in_packed, render(&fallback, "", Some("Packed")).await);
    assert_eq!(
        render(&packed, "greeting", None).await,
        render(&packed, "", Some("Themed")).await,
        "the theme's text"
    );
    app.stop().await;
}

/// An archive of two animations (the second with a PNG dotlottie-js moved to `i/`): the
/// template is the one CreateTemplate names by id (the first without one), lists both, and
/// renders as that animation's JSON; the two are two renders, never one de-duplicated; an id
/// the archive lacks, or one given with a template that is no archive, is refused naming
/// `animation_id`.
#[tokio::test]
async fn each_animation_of_a_dotlottie_js_archive_is_a_template_by_its_id() {
    let app = spawn_app().await;
    let green = image::RgbaImage::from_pixel(100, 100, image::Rgba([0, 255, 0, 255]));
    let png = super::image_slots::png(&green);
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let photo = image_layer_template(
        serde_json::json!({"id": "img", "w": 100, "h": 100, "u": "", "p": uri, "e": 1}),
    );
    let archive = dotlottie_js(serde_json::json!({"version": 2, "animations": [
        {"id": "ball", "data": json(BALL)}, {"id": "photo", "data": photo.clone()}]}));
    let names = entry_names(&archive);
    assert!(
        names.iter().any(|name| name.starts_with("i/")),
        "dotlottie-js keeps the image in i/: {names:?}"
    );
    let first = create_choosing(&app, archive.clone(), "", Default::default())
        .await
        .unwrap();
    assert_eq!(first.animations, ["ball", "photo"]);
    assert_eq!(first.animation_id, "");
    let ball = app.create("ball.json", corpus(BALL)).await.unwrap();
    assert_eq!(
        (first.width, first.color_slots.clone()),
        (ball.width, ball.color_slots.clone())
    );
    let chosen = create_choosing(&app, archive.clone(), "photo", Default::default())
        .await
        .unwrap();
    assert_eq!(chosen.animation_id, "photo");
    assert_eq!(chosen.image_slots.len(), 1);
    assert!(chosen.image_slots[0].has_default);
    let as_json = app
        .create("photo.json", serde_json::to_vec(&photo).unwrap())
        .await
        .unwrap();
    let render = |template: &proto::Template| {
        let request = small_request(&template.template_id, proto::Format::Gif);
        let app = &app;
        async move { sha(app.render(request).await) }
    };
    let photo_sha = render(&chosen).await;
    assert_eq!(photo_sha, render(&as_json).await, "the chosen animation");
    assert_eq!(
        render(&first).await,
        render(&ball).await,
        "the first animation"
    );
    assert_ne!(photo_sha, render(&first).await);
    // The HTTP door's raw upload takes the id as a query parameter beside the name.
    let post = |query: &str| {
        let url = format!("http://{}/v1/templates?{query}", app.address);
        reqwest::Client::new().post(url)
    };
    let answer = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.unwrap();
        response.json::<serde_json::Value>().await.unwrap()
    };
    let http = answer(post("name=photo&animation_id=photo").body(archive.clone())).await;
    assert_eq!(http["animationId"], "photo", "{http}");
    assert_eq!(http["animations"], serde_json::json!(["ball", "photo"]));
    // Beside a JSON body too.
    let body = serde_json::json!({"name": "photo",
        "lottieJson": base64::engine::general_purpose::STANDARD.encode(&archive)});
    let http = answer(post("animation_id=photo").json(&body)).await;
    assert_eq!(http["animationId"], "photo", "{http}");
    let unknown = create_choosing(&app, archive, "nope", Default::default())
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument, "{unknown:?}");
    assert_eq!(reason(&unknown), "ANIMATION_UNKNOWN", "{unknown:?}");
    assert_eq!(violated_fields(&unknown), ["animation_id"], "{unknown:?}");
    assert!(unknown.message().contains("photo"), "{unknown:?}");
    let not_packed = create_choosing(&app, corpus(BALL), "ball", Default::default())
        .await
        .unwrap_err();
    assert_eq!(
        violated_fields(&not_packed),
        ["animation_id"],
        "{not_packed:?}"
    );
    app.stop().await;
}
