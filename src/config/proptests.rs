//! Host-only property tests of the configuration parser.

use super::*;
use proptest::prelude::*;

proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Config::from_json(&bytes, &|_| None);
    }

    #[test]
    fn parser_never_panics_on_json_shaped_input(
        attempts in any::<i64>(), failures in any::<i64>(), window in ".{0,12}",
        trigger in prop_oneof![any::<i64>().prop_map(|v| v.to_string()), "\"[a-z0-9_]{0,12}\""],
    ) {
        let json = format!(
            r#"{{"providers":[{{"name":"a"}}],"chains":[{{"name":"c","providers":["a"],"max_attempts":{attempts},"fallback_on":[{trigger}]}}],"breaker":{{"failures":{failures},"window":{window:?}}}}}"#
        );
        let _ = Config::from_json(json.as_bytes(), &|_| None);
    }
}
