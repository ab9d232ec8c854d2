//! Foundations every layer uses: text escaping, dataset globs, input limits and reading, devices
//! and dtypes named on the command line, the dtypes' ranking by rounding error, progress, memory
//! maps, the output policy, `/proc` facts and the JSON documents' encoding.
//! Nothing here knows about models, files' formats or reports.

pub mod device;
pub mod escape;
pub mod glob;
pub mod input;
pub mod json_doc;
pub mod limits;
pub mod mapped;
pub mod output;
pub mod precision;
pub mod progress;
pub mod sysinfo;
