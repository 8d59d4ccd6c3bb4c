//! The mattes lowering's unit tests: what each rewrite does to a template's JSON.

use super::*;

fn layer(ind: i64, ty: i64) -> Value {
    json!({"ind": ind, "ty": ty, "ks": {"p": {"a": 0, "k": [ind, 0, 0]}}, "ip": 0, "op": 10, "st": 0,
           "shapes": [{"ty": "gr", "it": []}]})
}

fn with(mut layer: Value, key: &str, value: Value) -> Value {
    layer[key] = value;
    layer
}

fn animation(layers: Vec<Value>) -> Value {
    json!({"w": 10, "h": 10, "fr": 30, "ip": 0, "op": 10, "layers": layers})
}

fn indices(layers: &Value) -> Vec<i64> {
    layers
        .as_array()
        .unwrap()
        .iter()
        .map(|layer| layer["ind"].as_i64().unwrap())
        .collect()
}

#[test]
fn a_template_with_nothing_to_lower_is_left_as_it_is() {
    // Adjacent matte on a precomp layer, masks rlottie draws right, no orphan source.
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        with(with(layer(2, 0), "tt", json!(1)), "refId", json!("a")),
        with(
            layer(3, 4),
            "masksProperties",
            json!([{"mode": "a", "x": {"a": 0, "k": 0}}, {"mode": "s"}, {"mode": "f"}]),
        ),
    ]);
    json["assets"] = json!([{"id": "a", "layers": [layer(1, 4)]}]);
    let before = json.clone();
    let report = lower_mattes_and_masks(&mut json, 30);
    assert_eq!(report, MatteReport::default());
    assert_eq!(json.to_string(), before.to_string());
}

#[test]
fn a_matted_shape_layer_becomes_a_matted_precomp_of_itself() {
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        with(with(layer(2, 4), "tt", json!(2)), "parent", json!(1)),
    ]);
    let report = lower_mattes_and_masks(&mut json, 30);
    assert_eq!(report.lowered_layers, 1);
    let wrapper = &json["layers"][1];
    assert_eq!(wrapper["ty"], json!(0));
    assert_eq!(wrapper["ind"], json!(2));
    assert_eq!(wrapper["tt"], json!(2));
    assert_eq!(wrapper["parent"], json!(1));
    assert_eq!(
        wrapper["ks"]["p"]["k"],
        json!([2, 0, 0]),
        "the transform moves out"
    );
    assert_eq!(
        (wrapper["st"].clone(), wrapper["sr"].clone()),
        (json!(0), json!(1))
    );
    assert!(
        wrapper.get("w").is_none(),
        "an unsized precomp clips nothing"
    );
    let asset = &json["assets"][0];
    assert_eq!(asset["id"], wrapper["refId"]);
    let inner = &asset["layers"][0];
    assert_eq!(inner["ty"], json!(4));
    assert_eq!(inner["shapes"], layer(2, 4)["shapes"]);
    assert_eq!(inner["ks"], identity_transform());
    assert!(inner.get("tt").is_none() && inner.get("parent").is_none());
}

#[test]
fn wrapper_asset_ids_do_not_collide_with_the_templates_own() {
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        with(layer(2, 4), "tt", json!(1)),
    ]);
    json["assets"] = json!([{"id": format!("{WRAPPER_ASSET_PREFIX}0"), "layers": []}]);
    lower_mattes_and_masks(&mut json, 30);
    assert_eq!(json["assets"].as_array().unwrap().len(), 2);
    assert_eq!(
        json["layers"][1]["refId"],
        json!(format!("{WRAPPER_ASSET_PREFIX}1"))
    );
}

#[test]
fn a_matte_parent_elsewhere_is_moved_directly_above_its_layer() {
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        layer(3, 4),
        with(with(layer(2, 0), "tt", json!(1)), "tp", json!(1)),
    ]);
    lower_mattes_and_masks(&mut json, 30);
    assert_eq!(indices(&json["layers"]), vec![3, 1, 2]);
    assert_eq!(json["layers"][1]["td"], json!(1));
}

#[test]
fn a_matte_parent_shared_by_two_layers_is_copied_for_the_second() {
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        with(with(layer(2, 0), "tt", json!(1)), "tp", json!(1)),
        layer(3, 4),
        with(with(layer(4, 0), "tt", json!(1)), "tp", json!(1)),
    ]);
    let report = lower_mattes_and_masks(&mut json, 30);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    // The copy takes a fresh index above every other; the original stays in place.
    assert_eq!(indices(&json["layers"]), vec![1, 2, 3, 5, 4]);
    assert_eq!(json["layers"][3]["td"], json!(1));
    assert_eq!(json["layers"][3]["ks"], json["layers"][0]["ks"]);
}

#[test]
fn copies_beyond_the_budget_are_reported_and_not_made() {
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        with(with(layer(2, 0), "tt", json!(1)), "tp", json!(1)),
        layer(3, 4),
        with(with(layer(4, 0), "tt", json!(1)), "tp", json!(1)),
    ]);
    let report = lower_within_copy_budget(&mut json, 30, 10);
    assert_eq!(report.warnings, vec![COPY_BUDGET_WARNING.to_owned()]);
    assert_eq!(indices(&json["layers"]), vec![1, 2, 3, 4]);
}

#[test]
fn a_matte_parent_naming_no_layer_is_reported() {
    let mut json = animation(vec![
        with(layer(1, 4), "td", json!(1)),
        with(with(layer(2, 0), "tt", json!(1)), "tp", json!(99)),
    ]);
    let report = lower_mattes_and_masks(&mut json, 30);
    assert_eq!(
        report.warnings,
        vec![MISSING_MATTE_PARENT_WARNING.to_owned()]
    );
    assert_eq!(indices(&json["layers"]), vec![1, 2]);
}

#[test]
fn a_matte_source_with_nothing_matted_below_becomes_a_null_layer() {
    let mut json = animation(vec![
        layer(3, 4),
        with(layer(1, 4), "td", json!(1)),
        layer(2, 4),
    ]);
    lower_mattes_and_masks(&mut json, 30);
    let source = &json["layers"][1];
    assert_eq!(source["ty"], json!(layer_type::NULL));
    assert!(source.get("td").is_none() && source.get("shapes").is_none());
    assert_eq!(source["ks"], layer(1, 4)["ks"], "it still parents");
    assert_eq!(json["layers"][0]["ty"], json!(4));
}

#[test]
fn masks_lose_mode_none_and_draw_lighten_and_darken_as_add() {
    let mut json = animation(vec![with(
        with(layer(1, 4), "hasMask", json!(true)),
        "masksProperties",
        json!([{"mode": "n"}, {"mode": "l"}, {"mode": "d"}, {"mode": "s"}]),
    )]);
    lower_mattes_and_masks(&mut json, 30);
    let modes: Vec<&str> = json["layers"][0]["masksProperties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|mask| mask["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, vec!["a", "a", "s"]);

    let mut only_none = animation(vec![with(
        with(layer(1, 4), "hasMask", json!(true)),
        "masksProperties",
        json!([{"mode": "n"}]),
    )]);
    lower_mattes_and_masks(&mut only_none, 30);
    assert!(only_none["layers"][0].get("masksProperties").is_none());
    assert_eq!(only_none["layers"][0]["hasMask"], json!(false));
}

#[test]
fn animated_mask_expansion_is_reported() {
    let mut json = animation(vec![with(
        layer(1, 4),
        "masksProperties",
        json!([{"mode": "a", "x": {"a": 1, "k": [{"t": 0, "s": [0]}, {"t": 5, "s": [4]}]}}]),
    )]);
    let report = lower_mattes_and_masks(&mut json, 30);
    assert_eq!(report.warnings, vec![EXPANSION_WARNING.to_owned()]);
    assert_eq!(report.lowered_layers, 0);
}
