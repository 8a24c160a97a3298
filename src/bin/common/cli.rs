//! Command-line pieces shared by the tools (`mcore-topo`, `mcore-selftest`): flag splitting and
//! the layout flags (`--tp --pp --vpp --cp --hcp --ep --etp --dist-opt-instances --order
//! --rank-offset`). Errors are one line naming the flag and the bad value.
#![forbid(unsafe_code)]

use mcore_init::topology::TopologyConfig;

/// Usage text of the layout flags.
pub const LAYOUT_USAGE: &str = "[--tp N] [--pp N] [--vpp N] [--cp N] [--hcp S0,S1,...] [--ep N] [--etp N] \
[--dist-opt-instances N] [--order tp-cp-ep-dp-pp] [--rank-offset N]";

/// `arg` as text, or an error naming its position (1-based) and its bytes as far as they read:
/// `std::env::args` would panic on it.
pub fn utf8_arg(position: usize, arg: &std::ffi::OsStr) -> Result<&str, String> {
    arg.to_str().ok_or_else(|| format!("argument {position} ('{}') is not valid UTF-8", arg.to_string_lossy()))
}

/// The arguments as text (see [`utf8_arg`]); pass `std::env::args_os().skip(1)`.
pub fn utf8_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Vec<String>, String> {
    args.into_iter().enumerate().map(|(i, a)| utf8_arg(i + 1, &a).map(str::to_string)).collect()
}

/// A non-negative integer given to `flag` that fits in u32; the message names the flag.
pub fn number(flag: &str, text: &str) -> Result<u32, String> {
    let v: i128 = text.trim().parse().map_err(|_| format!("{flag}: '{text}' is not an integer"))?;
    if v < 0 {
        return Err(format!("{flag}: {v} is negative"));
    }
    u32::try_from(v).map_err(|_| format!("{flag}: {v} is too large (at most {})", u32::MAX))
}

/// Splits `--flag value` and `--flag=value` arguments.
pub struct Flags<'a> {
    args: &'a [String],
    i: usize,
}

impl<'a> Flags<'a> {
    pub fn new(args: &'a [String]) -> Self {
        Flags { args, i: 0 }
    }

    /// The next flag and its inline value (`--tp=2`), if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(&'a str, Option<&'a str>)> {
        let arg = self.args.get(self.i)?;
        self.i += 1;
        Some(match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (arg.as_str(), None),
        })
    }

    /// The value of `flag`: its inline value, else the next argument.
    pub fn value(&mut self, flag: &str, inline: Option<&'a str>) -> Result<&'a str, String> {
        if let Some(v) = inline {
            return Ok(v);
        }
        let v = self.args.get(self.i).ok_or_else(|| format!("{flag}: missing value"))?;
        self.i += 1;
        Ok(v)
    }
}

/// Apply one layout flag to `config`; `Ok(false)` when `flag` is not a layout flag.
pub fn layout_flag(config: &mut TopologyConfig, flag: &str, value: &str) -> Result<bool, String> {
    let n = |v: &str| number(flag, v);
    match flag {
        "--tp" => config.tp = n(value)?,
        "--pp" => config.pp = n(value)?,
        "--vpp" => config.vpp = Some(n(value)?),
        "--cp" => config.cp = n(value)?,
        "--hcp" => {
            if value.trim().is_empty() {
                return Err("--hcp: empty list (expected sizes like 2,2)".into());
            }
            config.hierarchical_cp = value
                .split(',')
                .map(|s| if s.trim().is_empty() { Err(format!("--hcp: empty entry in '{value}'")) } else { n(s) })
                .collect::<Result<_, _>>()?;
        }
        "--ep" => config.ep = n(value)?,
        "--etp" => config.etp = Some(n(value)?),
        "--dist-opt-instances" => config.dist_opt_instances = n(value)?,
        "--order" => config.order = value.to_string(),
        "--rank-offset" => config.rank_offset = n(value)?,
        "--gtp" => config.gtp = n(value)?,
        "--egtp" => config.egtp = n(value)?,
        "--local-world-size" => config.local_world_size = Some(n(value)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// A `--grid NAME:key=value,...` value: the grid's name and layout. Keys are the layout flags
/// without their dashes (`tp=4,rank-offset=8,local-world-size=8`); a part without `=` continues
/// the value before it (`hcp=2,2`).
pub fn grid_flag(value: &str) -> Result<(String, TopologyConfig), String> {
    let (name, spec) = value
        .split_once(':')
        .ok_or_else(|| format!("--grid: '{value}' is not NAME:key=value,... (e.g. rollout:tp=4)"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("--grid: '{value}' has no grid name before ':'"));
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
        match (part.split_once('='), pairs.last_mut()) {
            (Some((k, v)), _) => pairs.push((k.trim().to_string(), v.trim().to_string())),
            (None, Some(last)) => last.1 = format!("{},{}", last.1, part.trim()),
            (None, None) => return Err(format!("--grid {name}: '{part}' is not key=value")),
        }
    }
    let mut config = TopologyConfig::default();
    for (k, v) in pairs {
        let flag = format!("--{k}");
        match layout_flag(&mut config, &flag, &v) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!("--grid {name}: unknown key '{k}' (keys are the layout flags: tp, pp, ...)"))
            }
            Err(e) => return Err(format!("--grid {name}: {e}")),
        }
    }
    Ok((name.to_string(), config))
}

/// Whether `flag` is one of the layout flags (they all take a value).
pub fn is_layout_flag(flag: &str) -> bool {
    layout_flag(&mut TopologyConfig::default(), flag, "1").unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn grid_values_name_the_grid_key_and_value() {
        let (name, c) = grid_flag("rollout:tp=4,rank-offset=8,local-world-size=8,hcp=2,2").unwrap();
        assert_eq!((name.as_str(), c.tp, c.rank_offset, c.local_world_size), ("rollout", 4, 8, Some(8)));
        assert_eq!(c.hierarchical_cp, vec![2, 2]);
        let e = grid_flag("rollout:tq=4").unwrap_err();
        assert!(e.contains("rollout") && e.contains("'tq'"), "{e}");
        let e = grid_flag("rollout:tp=x").unwrap_err();
        assert!(e.contains("rollout") && e.contains("'x'"), "{e}");
        assert!(grid_flag("tp=4").unwrap_err().contains("NAME:key=value"));
        assert!(grid_flag(":tp=4").unwrap_err().contains("no grid name"));
    }

    #[test]
    fn layout_flags_inline_and_separate() {
        let a = args(&["--tp=2", "--hcp", "2,2", "--order", "tp-cp-ep-pp-dp", "--other"]);
        let mut f = Flags::new(&a);
        let mut cfg = TopologyConfig::default();
        let mut rest = vec![];
        while let Some((flag, inline)) = f.next() {
            if is_layout_flag(flag) {
                let v = f.value(flag, inline).unwrap();
                assert!(layout_flag(&mut cfg, flag, v).unwrap());
            } else {
                rest.push(flag);
            }
        }
        assert_eq!((cfg.tp, cfg.hierarchical_cp.clone(), cfg.order.as_str()), (2, vec![2, 2], "tp-cp-ep-pp-dp"));
        assert_eq!(rest, vec!["--other"]);
    }

    #[test]
    fn bad_values_are_named() {
        let mut cfg = TopologyConfig::default();
        assert_eq!(layout_flag(&mut cfg, "--tp", "two").unwrap_err(), "--tp: 'two' is not an integer");
        assert_eq!(layout_flag(&mut cfg, "--pp", "-3").unwrap_err(), "--pp: -3 is negative");
        assert!(layout_flag(&mut cfg, "--hcp", "2,,2").unwrap_err().contains("'2,,2'"));
        assert!(!layout_flag(&mut cfg, "--bogus", "1").unwrap());
        assert!(layout_flag(&mut cfg, "--gtp", "2").unwrap() && layout_flag(&mut cfg, "--egtp", "4").unwrap());
        assert!(layout_flag(&mut cfg, "--local-world-size", "8").unwrap());
        assert_eq!((cfg.gtp, cfg.egtp, cfg.local_world_size), (2, 4, Some(8)));
        assert_eq!(layout_flag(&mut cfg, "--gtp", "x").unwrap_err(), "--gtp: 'x' is not an integer");
        let a = args(&["--tp"]);
        let mut f = Flags::new(&a);
        let (flag, inline) = f.next().unwrap();
        assert_eq!(f.value(flag, inline).unwrap_err(), "--tp: missing value");
    }
}
