//! What a receiver's answer means, classified exactly as this service asks its own callers to
//! classify ours: a 2xx is done; a 4xx other than 408, 409, 425 and 429 is permanent (the
//! receiver refuses this delivery as it is: sending it again cannot help); 408, 409, 425,
//! 429, any 5xx, a timeout or a refused connection are passing, and retried after an
//! exponential backoff with full jitter, or after the receiver's `Retry-After` when it gives
//! one (capped), for as long as the delivery window lasts. A redirect is not followed: it is
//! permanent (a webhook URL that moved is the caller's to change).

use std::time::Duration;

/// First backoff before jitter; doubled each attempt.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// Longest backoff before jitter: an hour, so that a receiver down for a day is tried about
/// thirty times, not thousands.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Longest `Retry-After` honoured: a receiver cannot park a delivery for longer than a
/// backoff could.
pub const MAX_RETRY_AFTER: Duration = MAX_BACKOFF;

/// What one attempt's outcome means for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Never sent again.
    Permanent,
    /// Sent again after the backoff, or after this long when the receiver said so.
    Retry(Option<Duration>),
}

/// What an attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver answered this status, with this `Retry-After` if any.
    Answered {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer in time, no connection, or a broken one.
    NoAnswer,
    /// Never sent: the destination, or every address its name resolves to, is refused.
    Refused,
}

impl Verdict {
    pub fn of(outcome: Outcome) -> Verdict {
        match outcome {
            Outcome::NoAnswer => Verdict::Retry(None),
            Outcome::Refused => Verdict::Permanent,
            Outcome::Answered { status, .. } if (200..300).contains(&status) => Verdict::Delivered,
            Outcome::Answered {
                status,
                retry_after,
            } if matches!(status, 408 | 409 | 425 | 429) || status >= 500 => {
                Verdict::Retry(retry_after.map(|delay| delay.min(MAX_RETRY_AFTER)))
            }
            // 1xx (never final), 3xx (not followed) and the other 4xx.
            Outcome::Answered { .. } => Verdict::Permanent,
        }
    }
}

/// The wait before attempt `attempt + 1` (the first retry is attempt 1): full jitter, a
/// uniform draw in 0..=min(MAX_BACKOFF, FIRST_BACKOFF × 2^(attempt-1)), from `unit`, a
/// number in 0..1 the caller draws (so that a test can give its own).
pub fn backoff(attempt: u32, unit: f64) -> Duration {
    let exponent = attempt.saturating_sub(1).min(20);
    let ceiling = FIRST_BACKOFF.saturating_mul(1 << exponent).min(MAX_BACKOFF);
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

/// `Retry-After` as seconds or an HTTP date (RFC 9110 10.2.3), from `now`.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> Verdict {
        Verdict::of(Outcome::Answered {
            status,
            retry_after: None,
        })
    }

    #[test]
    fn answers_are_classified_as_callers_are_asked_to() {
        for status in [200, 201, 202, 204, 299] {
            assert_eq!(answered(status), Verdict::Delivered, "{status}");
        }
        for status in [400, 401, 403, 404, 410, 413, 422, 301, 302, 307, 101] {
            assert_eq!(answered(status), Verdict::Permanent, "{status}");
        }
        for status in [408, 409, 425, 429, 500, 502, 503, 504] {
            assert_eq!(answered(status), Verdict::Retry(None), "{status}");
        }
        assert_eq!(Verdict::of(Outcome::NoAnswer), Verdict::Retry(None));
        assert_eq!(Verdict::of(Outcome::Refused), Verdict::Permanent);
        let told = Verdict::of(Outcome::Answered {
            status: 503,
            retry_after: Some(Duration::from_secs(1)),
        });
        assert_eq!(told, Verdict::Retry(Some(Duration::from_secs(1))));
        let too_long = Verdict::of(Outcome::Answered {
            status: 429,
            retry_after: Some(Duration::from_secs(86_400)),
        });
        assert_eq!(too_long, Verdict::Retry(Some(MAX_RETRY_AFTER)));
    }

    #[test]
    fn backoff_doubles_to_its_ceiling_with_full_jitter() {
        assert_eq!(backoff(1, 1.0), FIRST_BACKOFF);
        assert_eq!(backoff(2, 1.0), FIRST_BACKOFF * 2);
        assert_eq!(backoff(4, 0.5), FIRST_BACKOFF * 4);
        assert_eq!(backoff(30, 1.0), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX, 1.0), MAX_BACKOFF);
        assert_eq!(backoff(3, 0.0), Duration::ZERO);
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(parse_retry_after(&date, now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
