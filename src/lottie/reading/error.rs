//! The error of a template that cannot be accepted: too large, not JSON, nested too deep,
//! too many values, or invalid at a JSON path. Below [`super::template`], [`super::fence`]
//! and [`super::assets`], which all return it.

use crate::error::{Classified, ErrorClass};
use crate::reason::Reason;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TemplateError {
    #[error("template is {size} bytes, larger than the {max} byte limit")]
    TooLarge { size: usize, max: usize },
    #[error("the template (.tgs, .lottie) inflates to more than the {max} byte limit")]
    InflatesTooLarge { max: usize },
    #[error("the archive has no animation {id:?}; its animations are {animations:?}")]
    AnimationUnknown { id: String, animations: Vec<String> },
    #[error("the template starts as gzip (.tgs) but does not inflate: {0}")]
    NotGzip(String),
    #[error("template is not valid JSON: {0}")]
    NotJson(String),
    #[error("template JSON nests deeper than {max} levels (at byte {offset})")]
    TooDeep { max: usize, offset: usize },
    #[error("template JSON holds more than {max} values")]
    TooManyValues { max: usize },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl TemplateError {
    pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        TemplateError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl Classified for TemplateError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Deterministic
    }
    fn reason(&self) -> Reason {
        match self {
            TemplateError::TooLarge { .. } | TemplateError::InflatesTooLarge { .. } => {
                Reason::TemplateTooLarge
            }
            TemplateError::TooManyValues { .. } => Reason::TemplateTooComplex,
            TemplateError::AnimationUnknown { .. } => Reason::AnimationUnknown,
            _ => Reason::TemplateInvalid,
        }
    }
}
