//! Signed download URLs checked by a SigV4 verification of our own, not by the S3 stand-in:
//! moto_server (`./dev test`'s S3 server) serves a presigned URL whatever its signature, so a
//! fetch there proves nothing about the signature. The verification here is AWS Signature
//! Version 4 for query-string authentication written out from AWS's documentation
//! ("Authenticating Requests: Using Query Parameters", Amazon S3 API reference), shown right
//! on AWS's own published example, and judges a URL as S3 does: the algorithm, the
//! credential's key, date, region and service, the signed headers, the expiry window, then
//! the signature recomputed from the URL's own parts with the secret key. It never calls the
//! signer under test (object_store's).

use super::object_storage::{s3_endpoint, TestBucket};
use crate::helpers::{small_request, spawn_app_with};
use hmac::Mac;
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto;
use lottie_render::storage::settings::S3Credentials;
use lottie_render::storage::ObjectStorage;
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The credentials and region the farm's servers sign with (`TestBucket::configure`).
pub(crate) const TEST_KEY: SigningKey = SigningKey {
    access_key_id: "lottie-test",
    secret_access_key: "lottie-test-secret",
    region: "us-east-1",
};
/// How far a signature's date may be from the verifier's clock (S3's allowance).
const CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);
/// The longest expiry SigV4 accepts: seven days.
const MAX_EXPIRES_SECONDS: u64 = 7 * 24 * 3600;

/// Who may sign, as a verifying server knows them.
#[derive(Clone, Copy)]
pub(crate) struct SigningKey {
    pub(crate) access_key_id: &'static str,
    pub(crate) secret_access_key: &'static str,
    pub(crate) region: &'static str,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// SigV4's URI encoding: every byte but the unreserved `A-Z a-z 0-9 - _ . ~` as `%XX`.
fn uri_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// `YYYYMMDDTHHMMSSZ` as a time (the proleptic Gregorian calendar, days from 1970-01-01).
fn amz_date(text: &str) -> Option<SystemTime> {
    let digits = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    if text.len() != 16 || &text[8..9] != "T" || !text.ends_with('Z') {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hour, minute, second) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    // Howard Hinnant's days_from_civil.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// What a verifying server finds of a presigned GET of `url` at `now` under `key`: the
/// signing time and the expiry when it is good, why not otherwise.
pub(crate) fn verify_presigned_get(
    url: &str,
    key: &SigningKey,
    now: SystemTime,
) -> Result<(SystemTime, Duration), String> {
    let url = url::Url::parse(url).map_err(|error| format!("not a URL: {error}"))?;
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let param = |name: &str| {
        let mut values = pairs.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
        match (values.next(), values.next()) {
            (Some(value), None) => Ok(value.as_str()),
            _ => Err(format!("{name} missing or repeated")),
        }
    };
    if param("X-Amz-Algorithm")? != "AWS4-HMAC-SHA256" {
        return Err("not AWS4-HMAC-SHA256".into());
    }
    let date = param("X-Amz-Date")?;
    let signed_at = amz_date(date).ok_or("X-Amz-Date is not YYYYMMDDTHHMMSSZ")?;
    let scope = format!("{}/{}/s3/aws4_request", &date[..8], key.region);
    let credential = param("X-Amz-Credential")?;
    if credential != format!("{}/{scope}", key.access_key_id) {
        return Err(format!(
            "credential {credential:?}, not {}/{scope}",
            key.access_key_id
        ));
    }
    if param("X-Amz-SignedHeaders")? != "host" {
        return Err("only the host header is signed by a presigned GET".into());
    }
    let expires: u64 = param("X-Amz-Expires")?
        .parse()
        .map_err(|_| "X-Amz-Expires is not a number")?;
    if !(1..=MAX_EXPIRES_SECONDS).contains(&expires) {
        return Err(format!("X-Amz-Expires {expires} is outside 1..=604800"));
    }
    let expires = Duration::from_secs(expires);
    if now + CLOCK_SKEW < signed_at {
        return Err("signed in the future".into());
    }
    if now >= signed_at + expires {
        return Err("expired".into());
    }
    let signature = param("X-Amz-Signature")?;
    let mut query: Vec<(String, String)> = pairs
        .iter()
        .filter(|(name, _)| name != "X-Amz-Signature")
        .map(|(name, value)| (uri_encode(name), uri_encode(value)))
        .collect();
    query.sort();
    let query: Vec<String> = query
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let host = match url.port() {
        Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_owned(),
    };
    let canonical_request = format!(
        "GET\n{}\n{}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD",
        url.path(),
        query.join("&")
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let mut signing_key = format!("AWS4{}", key.secret_access_key).into_bytes();
    for part in [&date[..8], key.region, "s3", "aws4_request"] {
        signing_key = hmac(&signing_key, part);
    }
    if hex(&hmac(&signing_key, &string_to_sign)) != signature {
        return Err("signature does not match".into());
    }
    Ok((signed_at, expires))
}

/// Checks that `url` is a presigned GET good now under the farm servers' credentials.
#[track_caller]
pub(crate) fn assert_signed(url: &str) {
    if let Err(why) = verify_presigned_get(url, &TEST_KEY, SystemTime::now()) {
        panic!("{url}: {why}");
    }
}

/// AWS's published example (the same page): GET examplebucket/test.txt for a day from
/// 2013-05-24T00:00:00Z under the documentation's example key.
#[test]
fn the_verification_accepts_aws_published_example_and_nothing_changed_from_it() {
    const EXAMPLE: &str = "https://examplebucket.s3.amazonaws.com/test.txt\
        ?X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
        &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    let key = SigningKey {
        access_key_id: "AKIAIOSFODNN7EXAMPLE",
        secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        region: "us-east-1",
    };
    let signed = amz_date("20130524T000000Z").unwrap();
    assert_eq!(
        signed.duration_since(UNIX_EPOCH).unwrap().as_secs(),
        1_369_353_600
    );
    let an_hour_later = signed + Duration::from_secs(3600);
    assert_eq!(
        verify_presigned_get(EXAMPLE, &key, an_hour_later),
        Ok((signed, Duration::from_secs(86_400)))
    );
    let changed = [
        (
            EXAMPLE.replace("/test.txt", "/other.txt"),
            "signature does not match",
        ),
        (
            EXAMPLE.replace("86400", "86401"),
            "signature does not match",
        ),
        (
            EXAMPLE.replace("aeeed9bb", "aeeed9bc"),
            "signature does not match",
        ),
        (
            EXAMPLE.replace("examplebucket.s3", "otherbucket.s3"),
            "signature does not match",
        ),
    ];
    for (url, why) in changed {
        assert_eq!(
            verify_presigned_get(&url, &key, an_hour_later),
            Err(why.to_owned()),
            "{url}"
        );
    }
    let wrong_secret = SigningKey {
        secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEz",
        ..key
    };
    assert_eq!(
        verify_presigned_get(EXAMPLE, &wrong_secret, an_hour_later),
        Err("signature does not match".to_owned())
    );
    let a_day_later = signed + Duration::from_secs(86_400);
    assert_eq!(
        verify_presigned_get(EXAMPLE, &key, a_day_later),
        Err("expired".to_owned())
    );
}

/// The bucket's store as a server on it opens it, signing with `credentials`.
fn store_signing_with(
    bucket: &TestBucket,
    credentials: S3Credentials,
    scratch: &std::path::Path,
) -> ObjectStorage {
    let mut settings = ServerSettings::new("127.0.0.1:0".parse().unwrap(), "/".into());
    bucket.configure(&mut settings, &s3_endpoint());
    settings.storage.s3_credentials = Some(credentials);
    ObjectStorage::open(
        &settings.storage,
        scratch,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_jobs_download_url_passes_the_sigv4_verification_and_a_wrong_signature_does_not() {
    let bucket = TestBucket::create().await;
    let app = spawn_app_with(|settings| bucket.configure(settings, &s3_endpoint())).await;
    let template = app.create_template("slots-ball-colors-opacity.json").await;
    let job = app
        .render(small_request(&template.template_id, proto::Format::Gif))
        .await;
    let output = job.output.unwrap();
    let url = output.download_url.expect("a signed download URL");
    let now = SystemTime::now();
    let (signed_at, expires) =
        verify_presigned_get(&url, &TEST_KEY, now).unwrap_or_else(|why| panic!("{url}: {why}"));
    assert_eq!(expires, Duration::from_secs(3_600), "the default expiry");
    let expires_at = SystemTime::try_from(output.download_url_expires_at.unwrap()).unwrap();
    let apart = expires_at
        .duration_since(signed_at + expires)
        .unwrap_or_else(|early| early.duration());
    assert!(
        apart <= Duration::from_secs(5),
        "download_url_expires_at is the signature's end: {apart:?} apart"
    );
    assert!(
        url.contains(&format!("/outputs/{}.gif?", job.job_id)),
        "{url}"
    );
    // Its own parts changed, it is refused: another object, a longer life, past its end.
    let other = url.replace(&job.job_id, &uuid::Uuid::new_v4().to_string());
    let longer = url.replace("X-Amz-Expires=3600", "X-Amz-Expires=7200");
    for (what, changed) in [("another object", other), ("a longer life", longer)] {
        assert_eq!(
            verify_presigned_get(&changed, &TEST_KEY, now),
            Err("signature does not match".to_owned()),
            "{what}"
        );
    }
    assert_eq!(
        verify_presigned_get(&url, &TEST_KEY, signed_at + expires),
        Err("expired".to_owned())
    );
    app.stop().await;

    // A store signing with a secret the bucket does not know makes a URL the stand-in still
    // serves: the verification refuses it.
    let scratch = tempfile::tempdir().unwrap();
    let wrong = store_signing_with(
        &bucket,
        S3Credentials {
            access_key_id: TEST_KEY.access_key_id.into(),
            secret_access_key: "not-the-bucket-secret".into(),
        },
        scratch.path(),
    );
    let key = format!("outputs/{}.gif", job.job_id);
    let forged = wrong
        .signed_download_url(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        verify_presigned_get(&forged, &TEST_KEY, SystemTime::now()),
        Err("signature does not match".to_owned())
    );
    let served = reqwest::get(&forged).await.unwrap().status();
    eprintln!("the S3 stand-in answered a wrongly signed URL with {served}");
}
