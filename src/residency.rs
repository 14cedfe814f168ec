//! Where a provider keeps the data it is sent (docs/behaviour.md section 2.4): declared with
//! `residency`, or read from a cloud's region (Bedrock's in its authority, Vertex AI's in its
//! `path_prefix`). A chain with `same_residency` sends a request only to entries of its first
//! entry's residency; an unknown residency never matches.

use crate::envelope::Envelope;

/// A provider's residency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    Us,
    Eu,
    Apac,
    Global,
}

impl Residency {
    /// The words configuration takes.
    pub const NAMES: [&'static str; 4] = ["us", "eu", "apac", "global"];

    pub fn parse(word: &str) -> Option<Residency> {
        match word {
            "us" => Some(Residency::Us),
            "eu" => Some(Residency::Eu),
            "apac" => Some(Residency::Apac),
            "global" => Some(Residency::Global),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Residency::Us => "us",
            Residency::Eu => "eu",
            Residency::Apac => "apac",
            Residency::Global => "global",
        }
    }

    /// The residency of an AWS region or a Google Cloud location: `us-*` (`us-east-1`,
    /// `us-central1`, `us-gov-west-1`) and the multi-region `us`; `eu-*`, `europe-*` and `eu`;
    /// `ap-*`, `asia-*`, `australia-*`; `global`. Any other region (Canada, South America, the
    /// Middle East, Africa, ...) has none of these: unknown.
    pub fn of_region(region: &str) -> Option<Residency> {
        let area = region.split('-').next().unwrap_or(region);
        match area {
            "us" => Some(Residency::Us),
            "eu" | "europe" => Some(Residency::Eu),
            "ap" | "asia" | "australia" => Some(Residency::Apac),
            "global" if area.len() == region.len() => Some(Residency::Global),
            _ => None,
        }
    }

    /// The residency a cloud provider's region gives it, read from what the filter is
    /// configured with: Vertex AI's location in `path_prefix` (`/v1/projects/P/locations/R`,
    /// Claude and Gemini alike), Bedrock's region in its authority
    /// (`bedrock-runtime[-fips].<region>.amazonaws.com`; `llm-failover render` writes
    /// `residency` from `region` when the endpoint does not name one).
    pub fn of_cloud(
        envelope: Option<Envelope>,
        path_prefix: Option<&str>,
        authority: Option<&str>,
    ) -> Option<Residency> {
        match envelope? {
            Envelope::Vertex | Envelope::Gemini | Envelope::GeminiNative => {
                let (_, rest) = path_prefix?.split_once("/locations/")?;
                Residency::of_region(rest.split(['/', '?']).next()?)
            }
            Envelope::Bedrock | Envelope::BedrockConverse => {
                let host = authority?.split(':').next()?;
                Residency::of_region(crate::envelope::bedrock_region(host)?)
            }
            Envelope::AzureOpenAi => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_of_both_clouds_name_their_residency() {
        for (region, want) in [
            ("us-east-1", Some(Residency::Us)),
            ("us-gov-west-1", Some(Residency::Us)),
            ("us-central1", Some(Residency::Us)),
            ("us", Some(Residency::Us)),
            ("eu-west-1", Some(Residency::Eu)),
            ("europe-west4", Some(Residency::Eu)),
            ("eu", Some(Residency::Eu)),
            ("ap-northeast-1", Some(Residency::Apac)),
            ("asia-southeast1", Some(Residency::Apac)),
            ("australia-southeast1", Some(Residency::Apac)),
            ("global", Some(Residency::Global)),
            ("ca-central-1", None),
            ("sa-east-1", None),
            ("me-central1", None),
            ("northamerica-northeast1", None),
            ("global-x", None),
            ("usa", None),
            ("", None),
        ] {
            assert_eq!(Residency::of_region(region), want, "{region}");
        }
    }

    #[test]
    fn a_cloud_provider_reads_its_region_from_its_path_or_authority() {
        let vertex = |prefix| Residency::of_cloud(Some(Envelope::Vertex), Some(prefix), None);
        assert_eq!(
            vertex("/v1/projects/p/locations/europe-west4"),
            Some(Residency::Eu)
        );
        assert_eq!(
            vertex("/v1/projects/p/locations/global"),
            Some(Residency::Global)
        );
        assert_eq!(
            Residency::of_cloud(
                Some(Envelope::Gemini),
                Some("/v1/projects/p/locations/us-central1/endpoints/openapi"),
                None
            ),
            Some(Residency::Us)
        );
        let bedrock = |authority| Residency::of_cloud(Some(Envelope::Bedrock), None, authority);
        assert_eq!(
            bedrock(Some("bedrock-runtime.eu-central-1.amazonaws.com")),
            Some(Residency::Eu)
        );
        assert_eq!(
            bedrock(Some("bedrock-runtime-fips.us-east-1.amazonaws.com:443")),
            Some(Residency::Us)
        );
        assert_eq!(bedrock(Some("vpce-1.bedrock.example")), None);
        assert_eq!(bedrock(None), None);
        assert_eq!(
            Residency::of_cloud(None, Some("/v1/projects/p/locations/us"), None),
            None,
            "a plain provider declares its residency"
        );
    }

    #[test]
    fn every_name_parses_back() {
        for name in Residency::NAMES {
            assert_eq!(Residency::parse(name).map(Residency::as_str), Some(name));
        }
        assert_eq!(Residency::parse("US"), None);
    }
}
