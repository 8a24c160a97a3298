//! Command-line pieces shared by the tools (`mcore-topo`, `mcore-selftest`): flag splitting, the
//! layout flags (`--tp --pp --vpp --cp --hcp --ep --etp --gtp --egtp --dist-opt-instances --order
//! --rank-offset --local-world-size`) and named grids (`--grid NAME:key=value,...`, [`GridArgs`]).
//! Errors are one line naming the flag (or the grid and the key) and the bad value.
#![forbid(unsafe_code)]

use mcore_init::topology::TopologyConfig;

/// Usage text of the layout flags.
pub const LAYOUT_USAGE: &str = "[--tp N] [--pp N] [--vpp N] [--cp N] [--hcp S0,S1,...] [--ep N] [--etp N] \
[--dist-opt-instances N] [--order tp-cp-ep-dp-pp] [--rank-offset N]";

/// Usage text of `--grid`.
pub const GRID_USAGE: &str = "[--grid NAME:key=value,... ...] (keys as the layout flags without dashes, \
e.g. --grid rollout:tp=4,rank-offset=8,local-world-size=8; the plain layout flags describe grid 'default')";

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
    match flag.strip_prefix("--") {
        Some(key) => layout_key(config, key, flag, value),
        None => Ok(false),
    }
}

/// The layout keys, as the flags without their dashes (`--grid NAME:key=value,...`).
pub const LAYOUT_KEYS: [&str; 13] = [
    "tp",
    "pp",
    "vpp",
    "cp",
    "hcp",
    "ep",
    "etp",
    "gtp",
    "egtp",
    "dist-opt-instances",
    "order",
    "rank-offset",
    "local-world-size",
];

/// Set layout key `key` (`tp`, `rank-offset`, ...) to `value`; errors start with `label` (the
/// flag, or the grid and the key). `Ok(false)` when `key` is not a layout key.
fn layout_key(config: &mut TopologyConfig, key: &str, label: &str, value: &str) -> Result<bool, String> {
    let n = |v: &str| number(label, v);
    match key {
        "tp" => config.tp = n(value)?,
        "pp" => config.pp = n(value)?,
        "vpp" => config.vpp = Some(n(value)?),
        "cp" => config.cp = n(value)?,
        "hcp" => {
            if value.trim().is_empty() {
                return Err(format!("{label}: empty list (expected sizes like 2,2)"));
            }
            config.hierarchical_cp = value
                .split(',')
                .map(|s| if s.trim().is_empty() { Err(format!("{label}: empty entry in '{value}'")) } else { n(s) })
                .collect::<Result<_, _>>()?;
        }
        "ep" => config.ep = n(value)?,
        "etp" => config.etp = Some(n(value)?),
        "dist-opt-instances" => config.dist_opt_instances = n(value)?,
        "order" => config.order = value.to_string(),
        "rank-offset" => config.rank_offset = n(value)?,
        "gtp" => config.gtp = n(value)?,
        "egtp" => config.egtp = n(value)?,
        "local-world-size" => config.local_world_size = Some(n(value)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// One named grid of a tool's command line: `--grid NAME:key=value,...`, or the plain layout
/// flags (grid `default`).
#[derive(Debug, Clone)]
pub struct GridArg {
    pub name: String,
    pub config: TopologyConfig,
}

/// The name of the grid the plain layout flags describe (the runtime's first grid's default name).
pub use mcore_init::runtime::DEFAULT_GRID;

/// Parse `NAME:key=value,...` (the value of `--grid`). Keys are [`LAYOUT_KEYS`] (`_` may stand
/// for `-`); `hcp` takes a list, so items without `=` after it continue it
/// (`train:cp=4,hcp=2,2,tp=2`). Errors name the grid, the key and the value.
pub fn parse_grid(text: &str) -> Result<GridArg, String> {
    let example = "expected NAME:key=value,... (e.g. rollout:tp=4,rank-offset=8,local-world-size=8)";
    let Some((name, items)) = text.split_once(':') else {
        return Err(format!("--grid '{text}': {example}"));
    };
    if name.is_empty() {
        return Err(format!("--grid '{text}': no grid name before ':' ({example})"));
    }
    check_grid_name(name)?;
    let mut config = TopologyConfig::default();
    // (key, value) pairs, `hcp` lists rejoined.
    let mut pairs: Vec<(String, String)> = Vec::new();
    for item in items.split(',') {
        match item.split_once('=') {
            Some((key, value)) => pairs.push((key.trim().replace('_', "-"), value.to_string())),
            None => match pairs.last_mut() {
                Some((key, value)) if key == "hcp" => {
                    value.push(',');
                    value.push_str(item);
                }
                _ if item.trim().is_empty() && items.trim().is_empty() => {} // `NAME:` = all defaults
                _ if item.trim().is_empty() => return Err(format!("--grid {name}: empty item in '{items}'")),
                _ => return Err(format!("--grid {name}: '{item}' is not key=value ({example})")),
            },
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in &pairs {
        if seen.contains(&key.as_str()) {
            return Err(format!("--grid {name}: key {key} given twice"));
        }
        seen.push(key);
        let label = format!("--grid {name}: {key}");
        if !layout_key(&mut config, key, &label, value)? {
            let hint = if key == "world-size" { " (the world size is --world-size, shared by all grids)" } else { "" };
            return Err(format!("--grid {name}: unknown key '{key}'{hint}; keys: {}", LAYOUT_KEYS.join(", ")));
        }
    }
    Ok(GridArg { name: name.to_string(), config })
}

/// A grid name as the runtime takes it (`runtime::check_grid_name`), the error naming the flag.
fn check_grid_name(name: &str) -> Result<(), String> {
    mcore_init::runtime::check_grid_name(name).map_err(|e| format!("--grid: {e}"))
}

/// The grids of a command line: the plain layout flags (grid [`DEFAULT_GRID`]) and every
/// `--grid NAME:key=value,...`, in command-line order.
#[derive(Default)]
pub struct GridArgs {
    default: TopologyConfig,
    /// Whether a plain layout flag was given.
    default_given: bool,
    named: Vec<GridArg>,
}

impl GridArgs {
    /// Take `flag` (with its value) if it is a layout flag or `--grid`; `Ok(false)` otherwise.
    pub fn flag<'a>(&mut self, flag: &str, inline: Option<&'a str>, flags: &mut Flags<'a>) -> Result<bool, String> {
        if flag == "--grid" {
            let grid = parse_grid(flags.value(flag, inline)?)?;
            if self.named.iter().any(|g| g.name == grid.name) {
                return Err(format!("--grid {}: a grid of that name is already given", grid.name));
            }
            self.named.push(grid);
            return Ok(true);
        }
        if !is_layout_flag(flag) {
            return Ok(false);
        }
        layout_flag(&mut self.default, flag, flags.value(flag, inline)?)?;
        self.default_given = true;
        Ok(true)
    }

    /// Whether any `--grid` was given.
    pub fn has_named(&self) -> bool {
        !self.named.is_empty()
    }

    /// The grids: `default` first when plain layout flags were given or no `--grid` was, then
    /// the `--grid` ones in command-line order.
    pub fn finish(self) -> Result<Vec<GridArg>, String> {
        let explicit_default = self.named.iter().any(|g| g.name == DEFAULT_GRID);
        if self.default_given && explicit_default {
            return Err(format!(
                "--grid {DEFAULT_GRID}: the plain layout flags (--tp, --pp, ...) already describe grid \
                 '{DEFAULT_GRID}'; give one or the other"
            ));
        }
        let mut out = Vec::with_capacity(self.named.len() + 1);
        if self.default_given || self.named.is_empty() {
            out.push(GridArg { name: DEFAULT_GRID.to_string(), config: self.default });
        }
        out.extend(self.named);
        Ok(out)
    }
}

/// Whether `flag` is one of the layout flags (they all take a value).
pub fn is_layout_flag(flag: &str) -> bool {
    flag.strip_prefix("--").is_some_and(|key| LAYOUT_KEYS.contains(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
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

    fn grids(v: &[&str]) -> Result<Vec<GridArg>, String> {
        let a = args(v);
        let mut f = Flags::new(&a);
        let mut g = GridArgs::default();
        while let Some((flag, inline)) = f.next() {
            assert!(g.flag(flag, inline, &mut f)?, "{flag} not taken");
        }
        g.finish()
    }

    #[test]
    fn grids_from_flags_and_grid_options() {
        // Plain flags only: one grid, `default`.
        let g = grids(&["--tp", "2"]).unwrap();
        assert_eq!((g.len(), g[0].name.as_str(), g[0].config.tp), (1, "default", 2));
        // Nothing at all: the default grid with default sizes.
        assert_eq!(grids(&[]).unwrap()[0].config.tp, 1);
        // --grid only: no default grid.
        let g = grids(&["--grid", "train:tp=2,pp=2", "--grid=rollout:tp=4,rank-offset=8,local_world_size=8"]).unwrap();
        let names: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["train", "rollout"]);
        assert_eq!((g[0].config.tp, g[0].config.pp), (2, 2));
        assert_eq!((g[1].config.tp, g[1].config.rank_offset, g[1].config.local_world_size), (4, 8, Some(8)));
        // Both: default first.
        let g = grids(&["--grid", "rollout:tp=4", "--pp", "2"]).unwrap();
        assert_eq!((g[0].name.as_str(), g[0].config.pp, g[1].name.as_str()), ("default", 2, "rollout"));
        // hcp takes a list; the order keeps its dashes; every key is accepted.
        let g = parse_grid("a:cp=4,hcp=2,2,tp=2,order=tp-cp-ep-pp-dp").unwrap();
        assert_eq!((g.config.hierarchical_cp.clone(), g.config.tp), (vec![2, 2], 2));
        assert_eq!(g.config.order, "tp-cp-ep-pp-dp");
        let all: Vec<String> = LAYOUT_KEYS.iter().map(|k| format!("{k}=1")).collect();
        let g = parse_grid(&format!("all:{}", all.join(",").replace("order=1", "order=tp-cp-ep-dp-pp"))).unwrap();
        assert_eq!((g.config.vpp, g.config.etp, g.config.egtp), (Some(1), Some(1), 1));
        assert_eq!(parse_grid("plain:").unwrap().config.tp, 1);
    }

    #[test]
    fn grid_errors_name_the_grid_the_key_and_the_value() {
        let err = |text: &str| parse_grid(text).unwrap_err();
        assert_eq!(err("rollout:tp=x"), "--grid rollout: tp: 'x' is not an integer");
        assert_eq!(err("rollout:rank-offset=-8"), "--grid rollout: rank-offset: -8 is negative");
        assert!(err("rollout:tpp=4").starts_with("--grid rollout: unknown key 'tpp'; keys: tp, pp,"));
        assert!(err("rollout:world-size=4").contains("--world-size"));
        assert!(err("rollout").starts_with("--grid 'rollout': expected NAME:key=value"));
        assert!(err("roll out:tp=2").contains("grid name 'roll out'"));
        assert!(err(":tp=2").contains("no grid name before ':'"));
        assert_eq!(err("r:tp=2,tp=4"), "--grid r: key tp given twice");
        assert_eq!(err("r:tp=2,,pp=2"), "--grid r: empty item in 'tp=2,,pp=2'");
        assert!(err("r:tp=2,4").contains("'4' is not key=value"));
        assert!(err("r:cp=4,hcp=2,,2").contains("--grid r: hcp: empty entry in '2,,2'"));
        assert!(grids(&["--grid", "a:tp=2", "--grid", "a:tp=4"])
            .unwrap_err()
            .contains("--grid a: a grid of that name"));
        assert!(grids(&["--tp", "2", "--grid", "default:tp=4"])
            .unwrap_err()
            .contains("already describe grid 'default'"));
        assert_eq!(grids(&["--grid", "default:tp=4"]).unwrap()[0].config.tp, 4);
        assert_eq!(grids(&["--grid"]).unwrap_err(), "--grid: missing value");
    }
}
