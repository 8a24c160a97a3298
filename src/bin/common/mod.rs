//! Code shared by the command-line tools, outside the library's public API: each tool includes
//! it with `mod common;` (argument parsing in [`cli`], the few OS calls in [`os`]). A tool uses
//! only part of it, hence `dead_code` is allowed here.
#![allow(dead_code)]

pub mod cli;
pub mod os;
