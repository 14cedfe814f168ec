//! The provider's event stream translated for the caller (interface only: being written).

use crate::translate::StreamContext;

#[derive(Debug, Default)]
pub struct Translator {
    finished: bool,
}

impl Translator {
    pub fn new(cx: StreamContext) -> Translator {
        let _ = cx;
        Translator::default()
    }

    pub fn push(&mut self, chunk: &[u8], end: bool, out: &mut Vec<u8>) {
        out.extend_from_slice(chunk);
        self.finished |= end;
    }

    pub fn finished(&self) -> bool {
        self.finished
    }
}

/// Whether an OpenAI Chat request body sets `stream_options.include_usage` to `true`.
pub fn wants_usage(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Request {
        stream_options: Option<StreamOptions>,
    }
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        include_usage: Option<bool>,
    }
    serde_json::from_slice::<Request>(body).is_ok_and(|r| {
        r.stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::wants_usage;

    #[test]
    fn include_usage_is_read_from_the_callers_stream_options() {
        assert!(wants_usage(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#
        ));
        assert!(!wants_usage(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":false}}"#
        ));
        assert!(!wants_usage(br#"{"model":"m","stream":true}"#));
        assert!(!wants_usage(br#"{"model":"m","stream_options":null}"#));
        assert!(!wants_usage(b"not json"));
    }
}
