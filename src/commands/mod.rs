//! Each command as library code, without its command line: what the command does, from the
//! typed request `cli` hands it to the value it returns for printing.

pub mod bench;
pub mod check;
pub mod compare;
pub mod dump;
pub mod env;
pub mod exec_paths;
pub mod live;
pub mod selftest;
