//! The dashboard and the rules kept true to the code (issue 45): every metric named in
//! `deploy/grafana-dashboard.json`'s queries and in `deploy/prometheus-rules.yaml`'s
//! expressions exists in a running server's `/metrics`, and every label they match on or
//! group by exists on those metrics; the PrometheusRule holds the same groups as the rules
//! file. `./dev test` runs `promtool check rules` and `promtool test rules` on the rules
//! themselves.
//!
//! The server is made to expose every family the files use: a render that succeeds, one
//! that fails, refusals of a bad request and of a tenant over its request rate, an HTTP/JSON
//! call (prometheus-client writes no line at all for a labelled family with no series yet).

use crate::api::image_slots::{png_header_of, template_json, with_images};
use crate::helpers::*;
use lottie_render::grpc::proto;
use std::collections::{BTreeMap, BTreeSet};
use tonic::Code;

const BALL: &str = "slots-ball-colors-opacity.json";
const ACME: &str = "acme-dashboards-key";
const SPAM: &str = "spam-dashboards-key";

fn deploy_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

// --- PromQL, read just enough to name its metrics and labels ---------------------------

/// What an expression uses: each metric selector with the labels it matches on, and the
/// labels of its `by`, `without`, `on` and `ignoring` clauses.
#[derive(Debug, Default, PartialEq)]
struct Uses {
    selectors: Vec<(String, Vec<String>)>,
    grouping: BTreeSet<String>,
}

/// Words that are PromQL's own, never metric names: keywords, binary operators and the
/// aggregation operators (which may be followed by `by (…)` rather than by `(`; other
/// functions are told by the `(` after them).
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

/// The end of the quoted string starting at `start` (its closing quote's index + 1).
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// A name starting at `start`, and the index after it.
fn read_name(chars: &[char], start: usize) -> (String, usize) {
    let mut i = start;
    while i < chars.len() && is_name_char(chars[i]) {
        i += 1;
    }
    (chars[start..i].iter().collect(), i)
}

fn skip_spaces(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The label names of a `{…}` matcher list or a `(…)` label list starting at `start` (its
/// opening bracket), and the index after its closing one; values (strings) are skipped.
fn read_labels(chars: &[char], start: usize, close: char) -> (Vec<String>, usize) {
    let mut labels = Vec::new();
    let mut i = start + 1;
    while i < chars.len() && chars[i] != close {
        match chars[i] {
            '"' | '\'' | '`' => i = skip_string(chars, i),
            c if is_name_start(c) => {
                let (name, next) = read_name(chars, i);
                labels.push(name);
                i = next;
            }
            _ => i += 1,
        }
    }
    (labels, i + 1)
}

/// The metrics and labels `expr` uses. Skipped: string literals, range and subquery
/// durations (`[5m]`, `[$__rate_interval]`), numbers, `offset` durations, Grafana's `$`
/// variables, function names (a name followed by `(`) and keywords.
fn promql_uses(expr: &str) -> Uses {
    let chars: Vec<char> = expr.chars().collect();
    let mut uses = Uses::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i);
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A variable, or a number (digits, a point, an exponent, hex): to its end.
            i += 1;
            while i < chars.len() && (is_name_char(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if c == '{' {
            // A selector by matchers only (`{__name__="…"}`): its labels, no metric.
            let (labels, next) = read_labels(&chars, i, '}');
            uses.selectors.push((String::new(), labels));
            i = next;
        } else if is_name_start(c) {
            i = read_word(&chars, i, &mut uses);
        } else {
            i += 1;
        }
    }
    uses
}

/// A word at `start`: a keyword (with its label list), a function, or a metric name with
/// its matchers. Answers the index after what it read.
fn read_word(chars: &[char], start: usize, uses: &mut Uses) -> usize {
    let (word, after) = read_name(chars, start);
    let next = skip_spaces(chars, after);
    let opens = |bracket: char| chars.get(next) == Some(&bracket);
    if LABEL_LISTS.contains(&word.as_str()) {
        if opens('(') {
            let (labels, end) = read_labels(chars, next, ')');
            uses.grouping.extend(labels);
            return end;
        }
        return after;
    }
    if word == "offset" {
        // Its duration: `offset 5m`, `offset -1h`.
        let mut i = next;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '-') {
            i += 1;
        }
        return i;
    }
    if KEYWORDS.contains(&word.as_str()) || opens('(') {
        return after;
    }
    if opens('{') {
        let (labels, end) = read_labels(chars, next, '}');
        uses.selectors.push((word, labels));
        return end;
    }
    uses.selectors.push((word, Vec::new()));
    after
}

// --- What the files ask for -------------------------------------------------------------

/// The rules file's recording rule names, and every `expr` (one line, or a `|` block of
/// deeper-indented lines), each with the rule it belongs to.
fn rule_expressions(yaml: &str) -> (BTreeSet<String>, Vec<(String, String)>) {
    let lines: Vec<&str> = yaml.lines().collect();
    let (mut records, mut expressions, mut rule) = (BTreeSet::new(), Vec::new(), String::new());
    let mut rules = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start().trim_start_matches("- ");
        let indent = lines[i].len() - lines[i].trim_start().len();
        i += 1;
        if let Some(name) = line.strip_prefix("record:") {
            records.insert(name.trim().to_owned());
            (rule, rules) = (name.trim().to_owned(), rules + 1);
        } else if let Some(name) = line.strip_prefix("alert:") {
            (rule, rules) = (name.trim().to_owned(), rules + 1);
        } else if let Some(expr) = line.strip_prefix("expr:") {
            let mut text = expr.trim().to_owned();
            if text == "|" {
                text.clear();
                while i < lines.len()
                    && (lines[i].trim().is_empty()
                        || lines[i].len() - lines[i].trim_start().len() > indent)
                {
                    text.push_str(lines[i].trim());
                    text.push('\n');
                    i += 1;
                }
            }
            expressions.push((rule.clone(), text));
        }
    }
    assert!(rules > 0, "no rules read");
    assert_eq!(
        expressions.len(),
        rules,
        "one expr per rule, as this reader reads them"
    );
    (records, expressions)
}

/// Two names: a place and its query, or a metric and its label.
type Pair = (String, String);

/// Every query of the dashboard: its panels' targets (rows' nested panels too), each with
/// its panel's title; and its `label_values(metric, label)` variables.
fn dashboard_queries(json: &str) -> (Vec<Pair>, Vec<Pair>) {
    let dashboard: serde_json::Value = serde_json::from_str(json).expect("the dashboard parses");
    let mut queries = Vec::new();
    let mut stack: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = stack.pop() {
        stack.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .expect("every target has a PromQL expr");
            queries.push((
                panel["title"].as_str().unwrap_or("").to_owned(),
                expr.to_owned(),
            ));
        }
    }
    let mut label_values = Vec::new();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .expect("a query variable's query");
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {query}: label_values(metric, label)"));
        let (metric, label) = inner.rsplit_once(',').expect("label_values(metric, label)");
        label_values.push((metric.trim().to_owned(), label.trim().to_owned()));
    }
    assert!(queries.len() > 10, "the dashboard's queries were read");
    (queries, label_values)
}

// --- What the server exposes -------------------------------------------------------------

/// The exposition text read: each family's type (`# TYPE`), and each sample name's labels.
struct Exposed {
    types: BTreeMap<String, String>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

impl Exposed {
    fn read(text: &str) -> Exposed {
        let (mut types, mut labels) = (BTreeMap::new(), BTreeMap::<_, BTreeSet<_>>::new());
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
                types.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let chars: Vec<char> = line.chars().collect();
                let (name, after) = read_name(&chars, 0);
                let names = labels.entry(name).or_default();
                if chars.get(after) == Some(&'{') {
                    names.extend(read_labels(&chars, after, '}').0);
                }
            }
        }
        Exposed { types, labels }
    }

    /// Whether `name` is a series of an exposed family, by its type: a gauge's own name, a
    /// counter's `_total`, a histogram's `_bucket`, `_sum` or `_count`.
    fn has(&self, name: &str) -> bool {
        let of = |suffix: &str, kind: &str| {
            name.strip_suffix(suffix)
                .and_then(|family| self.types.get(family))
                .is_some_and(|found| found == kind)
        };
        self.types.get(name).is_some_and(|kind| kind == "gauge")
            || of("_total", "counter")
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| of(suffix, "histogram"))
    }

    /// What `other` exposes besides.
    fn merge(&mut self, other: Exposed) {
        self.types.extend(other.types);
        for (name, labels) in other.labels {
            self.labels.entry(name).or_default().extend(labels);
        }
    }

    fn labels_of(&self, name: &str) -> BTreeSet<String> {
        self.labels.get(name).cloned().unwrap_or_default()
    }
}

/// Labels Prometheus puts on every series it scrapes (the target's), never in the exposition.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// What is wrong with `expr` (from `place`) against `exposed`: unknown metrics, matchers on
/// labels their metric lacks, grouping labels none of its metrics has. `defined` names
/// (recording rules) are taken as they are.
fn problems(place: &str, expr: &str, exposed: &Exposed, defined: &BTreeSet<String>) -> Vec<String> {
    let uses = promql_uses(expr);
    let mut problems = Vec::new();
    let mut labels_here: BTreeSet<String> = TARGET_LABELS
        .iter()
        .map(|label| label.to_string())
        .collect();
    for (metric, labels) in &uses.selectors {
        if metric.is_empty() {
            problems.push(format!("{place}: a selector without a metric name: {expr}"));
        } else if defined.contains(metric) {
            continue;
        } else if !exposed.has(metric) {
            problems.push(format!("{place}: {metric} is not exposed by the server"));
        } else {
            let known = exposed.labels_of(metric);
            for label in labels {
                if !known.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                    problems.push(format!("{place}: {metric} has no label {label}"));
                }
            }
            labels_here.extend(known);
        }
    }
    for label in &uses.grouping {
        if !labels_here.contains(label) {
            problems.push(format!(
                "{place}: no metric of the expression has label {label}"
            ));
        }
    }
    problems
}

/// Every problem of the dashboard and the rules against `exposed`.
fn all_problems(dashboard: &str, rules: &str, exposed: &Exposed) -> Vec<String> {
    let (records, expressions) = rule_expressions(rules);
    let (queries, label_values) = dashboard_queries(dashboard);
    let mut found = Vec::new();
    for (rule, expr) in &expressions {
        found.extend(problems(&format!("rule {rule}"), expr, exposed, &records));
    }
    for (panel, expr) in &queries {
        found.extend(problems(
            &format!("panel {panel:?}"),
            expr,
            exposed,
            &records,
        ));
    }
    for (metric, label) in &label_values {
        if !exposed.has(metric) || !exposed.labels_of(metric).contains(label) {
            found.push(format!(
                "variable label_values({metric}, {label}): not exposed"
            ));
        }
    }
    found
}

// --- The tests ---------------------------------------------------------------------------

/// The calls that make the server expose every family the files use.
async fn exercise(app: &TestApp) {
    app.use_api_key(Some(ACME));
    let ball = app.create_template(BALL).await;
    let job = app.submit_small(&ball, proto::Format::Gif).await;
    assert_eq!(
        state(&app.finished(&job.job_id).await),
        proto::JobState::Succeeded
    );
    // A header promising 4096² pixels passes the boundary and fails in the worker.
    let photo = app.create("photo", template_json()).await.unwrap();
    let image = vec![("photo", png_header_of(4096, 4096), proto::ImageFit::Cover)];
    let job = app
        .submit(with_images(&photo.template_id, image))
        .await
        .unwrap();
    assert_eq!(
        state(&app.finished(&job.job_id).await),
        proto::JobState::Failed
    );
    let unknown = small_request(&uuid::Uuid::new_v4().to_string(), proto::Format::Gif);
    let status = app.submit(unknown).await.unwrap_err();
    assert_eq!(reason(&status), "TEMPLATE_NOT_FOUND", "{status:?}");
    let answer = reqwest::Client::new()
        .get(format!("http://{}/v1/templates", app.address))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{answer:?}");
    // Tenant spam calls past its burst.
    let mut spam = app.templates_as(Some(SPAM));
    let mut refused = None;
    for _ in 0..40 {
        if let Err(status) = spam
            .list_templates(proto::ListTemplatesRequest::default())
            .await
        {
            refused = Some(status);
            break;
        }
    }
    let refused = refused.expect("spam is refused within 40 calls");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    app.use_api_key(None);
}

#[tokio::test]
async fn every_metric_and_label_of_the_dashboard_and_the_rules_is_exposed_by_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let keys = [("acme", "ops", ACME), ("spam", "bot", SPAM)];
    let app = spawn_app_with_keys(dir.path(), &keys, |settings| {
        settings.limits.tenant_requests_per_second = Some(1);
        settings.limits.tenant_burst = Some(20);
    })
    .await;
    exercise(&app).await;
    let text = app.metrics_text().await;
    let mut exposed = Exposed::read(&text);
    // What only the real binary's start-up exposes: the sandbox self-test's verdicts (an
    // in-process server's workers are not its own program, so it skips the test).
    let binary = ServerProcess::start(&[]);
    let binary_text = binary.metrics_text().await;
    assert!(
        binary_text.contains("lottie_render_sandbox_protection{"),
        "{binary_text}"
    );
    exposed.merge(Exposed::read(&binary_text));
    assert!(binary.stop().await);
    let (dashboard, rules) = (
        deploy_file("grafana-dashboard.json"),
        deploy_file("prometheus-rules.yaml"),
    );
    let found = all_problems(&dashboard, &rules, &exposed);
    assert!(found.is_empty(), "{}\n\n{text}", found.join("\n"));

    // The series the SLOs and panels were added for count what they say.
    let value = |sample: &str| sample_value(&text, sample).unwrap_or_else(|| panic!("{sample}"));
    assert_eq!(
        value(r#"lottie_render_jobs_failed_total{reason="IMAGE_INVALID",retryable="false"}"#),
        1.0
    );
    assert_eq!(value("lottie_render_queue_wait_seconds_count"), 2.0);
    assert_eq!(
        value(r#"lottie_render_render_duration_seconds_count{format="gif"}"#),
        1.0
    );
    assert!(value(r#"lottie_render_tenant_render_seconds_total{tenant="acme"}"#) > 0.0);
    assert_eq!(
        value(
            r#"lottie_render_rejections_total{method="SubmitRender",code="InvalidArgument",reason="TEMPLATE_NOT_FOUND"}"#
        ),
        1.0
    );
    assert_eq!(
        value(r#"lottie_render_tenant_refusals_total{tenant="spam",reason="TENANT_RATE_LIMITED"}"#),
        1.0
    );
    assert_eq!(value("lottie_render_webhook_delivery_lag_seconds"), 0.0);
    app.stop().await;
}

/// The PrometheusRule is the rules file's groups, indented under `spec:`.
#[test]
fn the_prometheus_rule_holds_the_rules_files_groups() {
    let rules = deploy_file("prometheus-rules.yaml");
    let wrapped = deploy_file("prometheus-rule.yaml");
    let groups = &rules[rules.find("\ngroups:").expect("groups:") + 1..];
    let indented: String = groups
        .lines()
        .map(|line| {
            if line.is_empty() {
                "\n".to_owned()
            } else {
                format!("  {line}\n")
            }
        })
        .collect();
    let spec = &wrapped[wrapped.find("\nspec:\n").expect("spec:") + "\nspec:\n".len()..];
    assert!(wrapped.contains("\nkind: PrometheusRule\n"));
    assert!(
        spec == indented,
        "deploy/prometheus-rule.yaml's spec differs from deploy/prometheus-rules.yaml's groups: \
         copy them again"
    );
}

#[test]
fn promql_is_read_for_metric_and_label_names_only() {
    let uses = promql_uses(
        r#"histogram_quantile(0.95, sum by (le, method) (rate(lottie_render_request_duration_seconds_bucket{method=~"$method", code!="a{b}"}[$__rate_interval] offset 5m)))
           / ignoring (tenant) group_left sum without (instance) (lottie_render_tenant_render_seconds_total)
           > bool 1e3 and on (job) vector(14.4 * 0.005) or lottie_render:ratio_rate5m unless {__name__="x"}"#,
    );
    let selectors: Vec<(&str, Vec<&str>)> = uses
        .selectors
        .iter()
        .map(|(name, labels)| (name.as_str(), labels.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        selectors,
        [
            (
                "lottie_render_request_duration_seconds_bucket",
                vec!["method", "code"]
            ),
            ("lottie_render_tenant_render_seconds_total", vec![]),
            ("lottie_render:ratio_rate5m", vec![]),
            ("", vec!["__name__"]),
        ]
    );
    let grouping: Vec<&str> = uses.grouping.iter().map(String::as_str).collect();
    assert_eq!(grouping, ["instance", "job", "le", "method", "tenant"]);
}

/// A made-up metric, a label a metric lacks and a grouping label nothing has are each
/// reported; the real ones are not.
#[test]
fn a_name_the_server_does_not_expose_is_reported() {
    let exposed = Exposed::read(
        "# TYPE lottie_render_jobs_finished counter\n\
         lottie_render_jobs_finished_total{outcome=\"failed\"} 2\n\
         # TYPE lottie_render_queue_wait_seconds histogram\n\
         lottie_render_queue_wait_seconds_bucket{le=\"+Inf\"} 1\n\
         lottie_render_queue_wait_seconds_count 1\n\
         # TYPE lottie_render_queue_depth gauge\n\
         lottie_render_queue_depth 0\n\
         # EOF\n",
    );
    let defined = BTreeSet::from(["lottie_render:defined".to_owned()]);
    let check = |expr: &str| problems("test", expr, &exposed, &defined);
    assert!(check(
        r#"sum by (outcome) (rate(lottie_render_jobs_finished_total{outcome="failed"}[5m]))"#
    )
    .is_empty());
    assert!(check(
        "histogram_quantile(0.95, sum by (le) (rate(lottie_render_queue_wait_seconds_bucket[5m])))"
    )
    .is_empty());
    assert!(check("lottie_render_queue_depth > 3 and lottie_render:defined").is_empty());
    assert_eq!(
        check("rate(lottie_render_made_up_total[5m])"),
        ["test: lottie_render_made_up_total is not exposed by the server"]
    );
    // The suffix must fit the family's type.
    assert_eq!(check("lottie_render_queue_depth_total").len(), 1);
    assert_eq!(check("lottie_render_jobs_finished").len(), 1);
    assert_eq!(
        check(r#"lottie_render_jobs_finished_total{reason="x"}"#),
        ["test: lottie_render_jobs_finished_total has no label reason"]
    );
    assert_eq!(
        check("sum by (tenant) (lottie_render_queue_depth)"),
        ["test: no metric of the expression has label tenant"]
    );
}

/// Every alert's runbook_url names a heading of docs/operations.md (GitHub's anchors:
/// lower case, spaces as `-`, other punctuation dropped).
#[test]
fn every_alert_points_to_a_runbook_section_that_exists() {
    let rules = deploy_file("prometheus-rules.yaml");
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"),
    )
    .unwrap();
    let anchors: BTreeSet<String> = docs
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| {
            heading
                .trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let alerts = rules.matches("- alert:").count();
    let pointers: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("runbook_url: docs/operations.md#"))
        .collect();
    assert_eq!(
        pointers.len(),
        alerts,
        "one runbook_url into docs/operations.md per alert"
    );
    for anchor in pointers {
        assert!(
            anchors.contains(anchor),
            "docs/operations.md has no heading #{anchor}"
        );
    }
}
