//! The messages of pprof's `profile.proto` (package `perftools.profiles`, proto3), written from its public field
//! numbers and encoded by prost.

use prost::Message;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// A description of the samples' values.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The mapped objects; id 1 and up.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The locations (addresses); id 1 and up.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions; id 1 and up.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; index 0 is the empty string.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regular expression of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regular expression of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was collected, nanoseconds since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the profile covers, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period is.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, in `period_type`'s unit.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// String index of the type (a `sample_type` name) shown by default; unset, the last.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a type and unit, both string indices.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// E.g. `samples`, `cpu`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `count`, `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack of locations (leaf first) and one value per sample type.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `Profile::sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`: a key with a string or numeric value.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`: one mapped object.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Id, 1 and up.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Runtime start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Runtime end address (exclusive).
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the object's path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build id (hex).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// The locations of this mapping carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// They carry file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// They carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// They carry inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`: an address and its frames.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Id, 1 and up.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping holding the address, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Runtime address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The frames at the address: the last is the caller the earlier ones were inlined into.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several call sites folded into one location.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `Line`: a function and a line in it.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Id, 1 and up.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the (demangled) name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name as the object has it.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// The function's first line, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
