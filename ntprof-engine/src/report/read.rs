//! Reading a report back from its JSON document (the versioned schema), with its version checked first.

use super::{Report, SCHEMA_VERSION};

/// The report of a JSON document `text`; `name` names the document in the error messages (a file name).
///
/// The schema version is read first, so that a document of a newer schema gets a message about versions rather
/// than about a field.
///
/// ```
/// use ntprof_engine::{output, report};
///
/// let saved = output::json(&output::fixture::report())?;
/// let read = report::from_json(std::str::from_utf8(&saved).unwrap(), "prof.json")?;
/// assert_eq!(read, output::fixture::report());
/// assert!(report::from_json("{}", "x.json").unwrap_err().contains("no schema_version"));
/// # Ok::<(), String>(())
/// ```
pub fn from_json(text: &str, name: &str) -> Result<Report, String> {
    let version = serde_json::from_str::<serde_json::Value>(text)
        .map_err(|e| format!("{name} is not JSON: {e}"))?
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| {
            format!("{name} is not an ntprof JSON profile (it has no schema_version)")
        })?;
    if version > u64::from(SCHEMA_VERSION) {
        return Err(format!(
            "{name} has schema version {version}, newer than this ntprof reads ({SCHEMA_VERSION}): use a newer ntprof"
        ));
    }
    serde_json::from_str(text)
        .map_err(|e| format!("{name} is not a valid ntprof JSON profile: {e}"))
}
