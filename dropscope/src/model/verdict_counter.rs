//! A verdict counter's name (`<Xdp|Tc>:<dev>:<hook>:<prog>#<id>:<verdict>`), split into its
//! parts, and what it counts whatever device it is shown on.
use crate::vocab::counter::Counter;

/// One verdict counter's name, split: `(layer, device, hook, program, verdict)`.
pub fn parse(name: &str) -> Option<(&str, &str, &str, &str, &str)> {
    match Counter::parse(name)? {
        Counter::Verdict {
            layer,
            dev,
            hook,
            program,
            verdict,
        } => Some((layer.as_str(), dev, hook, program, verdict)),
        _ => None,
    }
}

/// What a verdict counter counts, whatever device it is shown on: `(layer, program id,
/// verdict)`. A program's verdicts are counted per program, once, on one of the places it is
/// attached, so a device renamed (or the program shown on another of its places) between two
/// readings is the same counter.
pub fn identity(name: &str) -> Option<(&str, &str, &str)> {
    let (layer, _, _, prog, verdict) = parse(name)?;
    let (_, id) = prog.rsplit_once('#')?;
    Some((layer, id, verdict))
}
