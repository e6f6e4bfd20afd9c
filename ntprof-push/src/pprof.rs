//! Reading pprof's `profile.proto` (package `perftools.profiles`): the messages the OTLP translation needs,
//! derived from the public field numbers, and the gunzip of a `.pb.gz` file.

use std::io::Read;

use prost::Message;

use crate::error::PushError;

/// `perftools.profiles.Profile` (the fields read here).
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What each value of a sample means.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mapped objects, id 1 and up.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Addresses, id 1 and up.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions, id 1 and up.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Strings; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Collection time, nanoseconds since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Covered time, nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the period counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between samples.
    #[prost(int64, tag = "12")]
    pub period: i64,
}

/// `perftools.profiles.ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index of the type.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index of the unit.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `perftools.profiles.Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `perftools.profiles.Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of a string value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `perftools.profiles.Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// End address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of the start.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the file name.
    #[prost(int64, tag = "5")]
    pub filename: i64,
}

/// `perftools.profiles.Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Id of its mapping, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Source lines, inlined callees first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `perftools.profiles.Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// Id of its function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `perftools.profiles.Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the readable name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the mangled name.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First line.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// At most this many bytes once decompressed: a profile is far smaller; a gzip bomb is refused.
const MAX_INFLATED: u64 = 1 << 30;

/// Decodes a pprof profile, gzipped (as `ntprof record --pprof` writes it) or not.
pub fn decode(bytes: &[u8]) -> Result<Profile, PushError> {
    let raw;
    let body = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_INFLATED + 1)
            .read_to_end(&mut out)
            .map_err(|e| PushError::Input(format!("the pprof profile does not gunzip: {e}")))?;
        if out.len() as u64 > MAX_INFLATED {
            return Err(PushError::Input(
                "the pprof profile inflates beyond 1 GiB".into(),
            ));
        }
        raw = out;
        &raw[..]
    } else {
        bytes
    };
    let p =
        Profile::decode(body).map_err(|e| PushError::Input(format!("not a pprof profile: {e}")))?;
    if p.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(PushError::Input(
            "not a pprof profile: string 0 is not empty".into(),
        ));
    }
    Ok(p)
}
