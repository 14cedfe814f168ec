//! A provider's cloud envelope (`api: azure_openai | bedrock | vertex | gemini`). Its
//! parameters travel in `path_prefix` (written by `llm-failover render` from `api_version`,
//! `project` and `region`): checked here.

use super::problems::At;
use super::raw::RawProvider;
use crate::envelope::Envelope;

/// The envelope `p.api` names, `None` for the plain APIs (and for unknown names, which the
/// caller reports).
#[inline]
pub fn of_provider(p: &RawProvider, at: &mut At) -> Option<Envelope> {
    let envelope = Envelope::parse(p.api.as_deref()?)?;
    let prefix = p.path_prefix.as_deref();
    if envelope == Envelope::Vertex && prefix.is_none() {
        at.field(
            "path_prefix",
            "api: vertex needs path_prefix: /v1/projects/PROJECT/locations/REGION (llm-failover render writes it from project and region)",
        );
    }
    if envelope != Envelope::AzureOpenAi && prefix.is_some_and(|p| p.contains('?')) {
        at.field(
            "path_prefix",
            "a query is only for api: azure_openai (its api-version)",
        );
    }
    Some(envelope)
}
