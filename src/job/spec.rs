//! What a comparison is asked to compare, before anything is loaded or run: the two sides,
//! typed, and whether the truth and floors are measured.

use candle_core::DType;

use crate::backends::BackendKind;
use crate::report::ReportMode;
use crate::util::precision::coarser;

/// A side run here: a backend at a dtype on the job's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    pub backend: BackendKind,
    pub dtype: DType,
    /// Fed side A's input to each layer (isolate mode: the error a layer adds, apart from what
    /// it inherits); only side B of a job whose side A is live can be fed.
    pub fed: bool,
}

/// One side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideSpec {
    Live(Live),
    /// Captures read from a file (`compare`), computed in `dtype`.
    File {
        dtype: DType,
    },
    /// A golden file this machine recomputes (`check`'s side A), computed in `dtype`.
    Golden {
        dtype: DType,
    },
}

impl SideSpec {
    /// The dtype the side was computed in: its floor's dtype.
    pub fn dtype(self) -> DType {
        match self {
            SideSpec::Live(l) => l.dtype,
            SideSpec::File { dtype } | SideSpec::Golden { dtype } => dtype,
        }
    }
}

/// Whether the f64 truth and the floors are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calibration {
    Measure,
    /// `--no-floor`: uncalibrated by request.
    NoFloor,
    /// Uncalibrated for want of a model or of token ids (the report says which).
    Unavailable,
}

/// How the calibration runs route tokens at MoE layers. A side's distance from a truth that
/// routed some token otherwise mixes that routing difference — and all it causes downstream —
/// into what should measure arithmetic; a truth under the side's own routing does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// Each run's router chooses (no side's choices at every MoE layer are at hand).
    #[default]
    Own,
    /// The truth and the floors use the choices both sides recorded (the same on both).
    Shared,
    /// Side A's truth and floor use A's recorded choices, B's truth and floor B's.
    EachSide,
}

/// A comparison of side A with side B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub a: SideSpec,
    pub b: SideSpec,
    pub calibration: Calibration,
    /// Every run also captures the values inside linear-attention layers.
    pub ops: bool,
    /// The truth and floor runs stop after this decoder layer (`compare --layers` on a deep
    /// model: the calibration costs only the layers reported).
    pub through: Option<usize>,
    /// How the calibration runs route at MoE layers (the choices are the job input's:
    /// [`crate::job::session::ModelInput::routes`]).
    pub routing: Routing,
}

impl Spec {
    /// The coarsest dtype compared: its bands judge the rows.
    pub fn dtype(&self) -> DType {
        coarser(self.a.dtype(), self.b.dtype())
    }

    /// The report's `mode`: how the two sides came to be.
    pub fn mode(&self) -> ReportMode {
        match (self.a, self.b) {
            (_, SideSpec::Live(Live { fed: true, .. })) => ReportMode::Isolate,
            (SideSpec::Live(_), SideSpec::Live(_)) => ReportMode::Propagate,
            (SideSpec::Golden { .. }, _) => ReportMode::Check,
            _ => ReportMode::Files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(dtype: DType, fed: bool) -> SideSpec {
        SideSpec::Live(Live {
            backend: BackendKind::Fused,
            dtype,
            fed,
        })
    }

    #[test]
    fn the_mode_and_dtype_follow_from_the_sides() {
        let spec = |a, b| Spec {
            a,
            b,
            calibration: Calibration::Measure,
            ops: false,
            through: None,
            routing: Routing::Own,
        };
        let s = spec(live(DType::F32, false), live(DType::F32, true));
        assert_eq!((s.mode(), s.dtype()), (ReportMode::Isolate, DType::F32));
        let s = spec(live(DType::F32, false), live(DType::F32, false));
        assert_eq!(s.mode(), ReportMode::Propagate);
        let s = spec(
            SideSpec::Golden { dtype: DType::F64 },
            live(DType::BF16, false),
        );
        assert_eq!((s.mode(), s.dtype()), (ReportMode::Check, DType::BF16));
        let s = spec(
            SideSpec::File { dtype: DType::F16 },
            SideSpec::File { dtype: DType::F32 },
        );
        assert_eq!((s.mode(), s.dtype()), (ReportMode::Files, DType::F16));
    }
}
