//! CUDA kernels of the `fused` backend (`gdn.cu` next to this file, compiled to PTX for sm_90
//! by build.rs and loaded once per device): causal conv + SiLU, the chunked gated delta rule
//! with the q/k L2 norm, scale and gates fused in, and the gated RMSNorm. Precision: the storage
//! dtype in and out, f32 sums and f32 state (f64 throughout for f64), one rounding per step.
//!
//! Two delta-rule kernels: bf16 with dk ≤ 128 runs `gdn_chunk_tc_bf16` (tensor cores, f32
//! operands carried as bf16 hi + lo, so it keeps the exact kernel's accuracy); every other case
//! runs the exact f32/f64 SIMT kernel `gdn_chunk_*`. [`implementation`] states this rule, and
//! [`delta_rule_kernel`] names the kernel a call runs.
//!
//! Launches are asynchronous: an asynchronous fault surfaces at the next synchronisation (the
//! forward checks the device after every layer, [`crate::util::device::check_device`], and every
//! read-back checks too). `HSDIFF_CUDA_SYNC=1` synchronises the stream after every launch
//! instead, so that a fault is reported by the kernel that caused it, by name (debugging; it
//! costs a host round trip per launch). Inputs are made contiguous first; outputs are fresh
//! buffers, optionally NaN-poisoned (`poison`) so that a test can prove every element was written.
//!
//! `shell` holds two kernels for code outside this backend: the gate of the layer shell and the
//! `reference` backend's recurrence, and the MoE router's ranking.
//!
//! The kernels' logic can be run without a GPU through `scripts/cuda-emu-test.sh`.

mod shell;
pub use shell::{RANK_MAX, log_decay, recurrent_rule, router_rank};

use candle_core::cuda_backend::cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchArgs, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, DType, Shape, Storage, StorageRef, Tensor, WithDType};

use crate::backends::{
    DeltaInputs, GdnDims, accumulation_dtype, check_conv_shapes, check_delta_rule_shapes,
    check_norm_shapes,
};
use crate::error::{Error, Result};

/// The kernels, as PTX text (nvcc -ptx at build time).
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gdn.ptx"));
const MODULE: &str = "hsdiff_fused_gdn";
const NAME: &str = "fused";
/// Threads per block of the delta-rule kernels and value columns per block (gdn.cu; the same
/// for the exact and the tensor-core kernel).
const GDN_THREADS: u32 = 256;
const DVT: usize = 32;
/// Largest dk of the tensor-core kernel (`TC_DKMAX` in gdn.cu: its state registers).
pub const TC_MAX_DK: usize = 128;
const TC_CHUNK: usize = 64;
const L2NORM_EPS_NOTE: &str = "q/k L2 norm eps 1e-6 (fixed in gdn.cu)";

/// What `--device cuda` runs for the fused backend.
pub fn implementation() -> String {
    format!(
        "fused/cuda-ptx-sm90 (chunk 64; delta rule: bf16 with dk <= {TC_MAX_DK} on the tensor \
         cores (gdn_chunk_tc_bf16: mma.sync bf16, f32 accumulation and state, f32 operands as \
         bf16 hi+lo), all else the exact f32/f64 kernel (gdn_chunk_*); {L2NORM_EPS_NOTE})"
    )
}

/// Which delta-rule kernel a call asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKernel {
    /// The tensor-core kernel where it applies (bf16, dk ≤ [`TC_MAX_DK`]), else the exact one:
    /// what the backend runs.
    Default,
    /// The exact f32/f64 SIMT kernel whatever the dtype (the bench's comparison).
    Exact,
}

/// The name of the delta-rule kernel `kernel` runs for storage type `T` and head dim `dk`.
pub fn delta_rule_kernel<T: Kernel>(kernel: RuleKernel, dk: usize) -> String {
    if uses_tensor_cores(kernel, T::DTYPE, dk) {
        "gdn_chunk_tc_bf16".to_string()
    } else {
        format!("gdn_chunk_{}", T::SUFFIX)
    }
}

fn uses_tensor_cores(kernel: RuleKernel, dtype: DType, dk: usize) -> bool {
    kernel == RuleKernel::Default && dtype == DType::BF16 && dk <= TC_MAX_DK
}

fn err(msg: impl Into<String>) -> Error {
    Error::backend(NAME, msg)
}

/// Storage types the kernels exist for, with their accumulation type and chunk length.
pub trait Kernel: CudaDType + DeviceRepr + WithDType {
    const SUFFIX: &'static str;
    /// Tokens per chunk of the delta-rule kernel (64; 32 in f64 to keep shared memory equal).
    const CHUNK: usize;
    type Acc: CudaDType + DeviceRepr + WithDType;
}
impl Kernel for half::bf16 {
    const SUFFIX: &'static str = "bf16";
    const CHUNK: usize = 64;
    type Acc = f32;
}
impl Kernel for half::f16 {
    const SUFFIX: &'static str = "f16";
    const CHUNK: usize = 64;
    type Acc = f32;
}
impl Kernel for f32 {
    const SUFFIX: &'static str = "f32";
    const CHUNK: usize = 64;
    type Acc = f32;
}
impl Kernel for f64 {
    const SUFFIX: &'static str = "f64";
    const CHUNK: usize = 32;
    type Acc = f64;
}

/// A contiguous CUDA tensor, read-locked for the duration of a launch.
struct Input<'a> {
    storage: StorageRef<'a>,
    start: usize,
    len: usize,
}

impl<'a> Input<'a> {
    fn new(t: &'a Tensor, what: &str) -> Result<Self> {
        let (storage, layout) = t.storage_and_layout();
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| err(format!("{what} is not contiguous")))?;
        if !matches!(&*storage, Storage::Cuda(_)) {
            return Err(err(format!("{what} is not on a CUDA device")));
        }
        Ok(Self {
            storage,
            start,
            len: end - start,
        })
    }

    fn cuda(&self) -> Result<&CudaStorage> {
        match &*self.storage {
            Storage::Cuda(cs) => Ok(cs),
            _ => Err(err("tensor is not on a CUDA device")),
        }
    }

    fn view<T: CudaDType>(&self) -> Result<CudaView<'_, T>> {
        Ok(self
            .cuda()?
            .as_cuda_slice::<T>()?
            .slice(self.start..self.start + self.len))
    }

    fn device(&self) -> Result<CudaDevice> {
        Ok(self.cuda()?.device.clone())
    }
}

/// A fresh output buffer: NaN-filled when `poison`, else uninitialised (the kernels write
/// every element).
fn alloc_out<T: DeviceRepr + WithDType>(
    dev: &CudaDevice,
    n: usize,
    poison: bool,
) -> Result<CudaSlice<T>> {
    if poison {
        Ok(dev.clone_htod(&vec![T::from_f64(f64::NAN); n])?)
    } else {
        // SAFETY: every kernel here writes all n elements before anything reads them.
        Ok(unsafe { dev.alloc::<T>(n) }?)
    }
}

fn wrap<T: CudaDType>(slice: CudaSlice<T>, dev: CudaDevice, shape: impl Into<Shape>) -> Tensor {
    Tensor::from_storage(
        Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev)),
        shape,
        BackpropOp::none(),
        false,
    )
}

/// The environment variable that makes every launch wait for its kernel ([`launch`]).
pub const SYNC_ENV: &str = "HSDIFF_CUDA_SYNC";

/// Whether `HSDIFF_CUDA_SYNC` is set to 1 (read once).
pub fn sync_every_launch() -> bool {
    static SYNC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SYNC.get_or_init(|| std::env::var(SYNC_ENV).is_ok_and(|v| v == "1"))
}

/// Launches on the device's stream; with `HSDIFF_CUDA_SYNC=1`, then waits for the stream so
/// that a fault is reported here, naming the kernel.
fn launch(
    mut args: LaunchArgs<'_>,
    cfg: LaunchConfig,
    dev: &CudaDevice,
    kernel: &str,
) -> Result<()> {
    // SAFETY: argument lists match the kernels' signatures in gdn.cu (checked by the callers'
    // shapes), and every buffer extent was validated against what the kernel indexes.
    unsafe { args.launch(cfg) }.map_err(|e| err(format!("launching {kernel}: {e}")))?;
    if !sync_every_launch() {
        return Ok(());
    }
    dev.cuda_stream()
        .synchronize()
        .map_err(|e| err(format!("CUDA error in {kernel}: {e}")))
}

fn i32_arg(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| err(format!("{what} = {v} does not fit the kernel's i32")))
}

/// Grid-stride launch shape for n independent work items.
fn grid_for(n: usize, per_block: usize) -> LaunchConfig {
    let blocks = n.div_ceil(per_block).clamp(1, 1 << 20) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

// --- conv1d + SiLU -------------------------------------------------------------------------

/// Causal depthwise conv + SiLU: x `[B, T, C]`, weight `[C, K]` → `[B, T, C]`.
pub fn conv1d_silu(x: &Tensor, weight: &Tensor, poison: bool) -> Result<Tensor> {
    let dims = check_conv_shapes(NAME, x, weight)?;
    dispatch_dtype!(
        x.dtype(),
        "CUDA kernels",
        conv_typed(x, weight, dims, poison)
    )
}

fn conv_typed<T: Kernel>(
    x: &Tensor,
    w: &Tensor,
    (b, t, c, k): (usize, usize, usize, usize),
    poison: bool,
) -> Result<Tensor> {
    let n = b * t * c;
    if n == 0 {
        return Ok(Tensor::zeros(x.dims(), x.dtype(), x.device())?);
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let (xi, wi) = (
        Input::new(&x, "conv input")?,
        Input::new(&w, "conv weight")?,
    );
    let dev = xi.device()?;
    let mut out = alloc_out::<T>(&dev, n, poison)?;
    let kernel = format!("conv1d_silu_{}", T::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    let (xv, wv) = (xi.view::<T>()?, wi.view::<T>()?);
    let (bb, tt, cc, kk) = (b as i64, t as i64, c as i64, i32_arg("conv kernel", k)?);
    let mut args = func.builder();
    args.arg(&xv).arg(&wv).arg(&mut out);
    args.arg(&bb).arg(&tt).arg(&cc).arg(&kk);
    launch(args, grid_for(n, 256), &dev, &kernel)?;
    Ok(wrap(out, dev, x.dims()))
}

// --- gated RMSNorm -------------------------------------------------------------------------

/// `w ⊙ x·rsqrt(mean x² + eps) ⊙ SiLU(z)` over the last dim; x, z, w one dtype.
pub fn gated_rms_norm(
    x: &Tensor,
    z: &Tensor,
    weight: &Tensor,
    eps: f64,
    poison: bool,
) -> Result<Tensor> {
    let dim = check_norm_shapes(NAME, x, z, weight)?;
    if z.dtype() != x.dtype() || weight.dtype() != x.dtype() {
        return Err(err(
            "gated norm input, gate and weight must share one dtype",
        ));
    }
    dispatch_dtype!(
        x.dtype(),
        "CUDA kernels",
        norm_typed(x, z, weight, eps, dim, poison)
    )
}

fn norm_typed<T: Kernel>(
    x: &Tensor,
    z: &Tensor,
    w: &Tensor,
    eps: f64,
    dim: usize,
    poison: bool,
) -> Result<Tensor> {
    let n = x.elem_count();
    if n == 0 || dim == 0 {
        return Ok(Tensor::zeros(x.dims(), x.dtype(), x.device())?);
    }
    let rows = n / dim;
    let (x, z, w) = (x.contiguous()?, z.contiguous()?, w.contiguous()?);
    let xi = Input::new(&x, "gated norm input")?;
    let zi = Input::new(&z, "gated norm gate")?;
    let wi = Input::new(&w, "gated norm weight")?;
    let dev = xi.device()?;
    let mut out = alloc_out::<T>(&dev, n, poison)?;
    let kernel = format!("gated_rms_norm_{}", T::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    let (xv, zv, wv) = (xi.view::<T>()?, zi.view::<T>()?, wi.view::<T>()?);
    let (rr, dd, ee) = (
        rows as i64,
        i32_arg("gated norm dim", dim)?,
        T::Acc::from_f64(eps),
    );
    let mut args = func.builder();
    args.arg(&xv).arg(&zv).arg(&wv).arg(&mut out);
    args.arg(&rr).arg(&dd).arg(&ee);
    // One warp per row, 8 rows per block.
    launch(args, grid_for(rows, 8), &dev, &kernel)?;
    Ok(wrap(out, dev, x.dims()))
}

// --- gated delta rule ----------------------------------------------------------------------

/// Bytes of dynamic shared memory of the exact delta-rule kernel (layout in gdn.cu).
pub fn gdn_shared_bytes<T: Kernel>(dk: usize) -> usize {
    let c = T::CHUNK;
    (2 * c * (dk + 1) + DVT * dk + DVT * c + 2 * c * c + 3 * c) * std::mem::size_of::<T::Acc>()
}

/// Bytes of dynamic shared memory of the tensor-core kernel (`gdn_tc_shared_bytes` in gdn.cu:
/// bf16 q/k/v double buffers and hi/lo operand tiles, then the f32 tiles).
pub fn gdn_tc_shared_bytes(dk: usize) -> usize {
    let (c, dkp) = (TC_CHUNK, dk.div_ceil(16) * 16);
    let u16s = 4 * c * (dkp + 8)
        + 2 * c * (DVT + 8)
        + 2 * c * (c + 8)
        + 4 * DVT * (c + 8)
        + 2 * DVT * (dkp + 8);
    let f32s = c * (c + 1) + c * (DVT + 1) + 6 * c;
    2 * u16s + 4 * f32s
}

/// The gated delta rule with the q/k L2 norm and dk^-1/2 scale inside: q, k `[B, T, Hk, dk]`,
/// v `[B, T, Hv, dv]`, g `[B, T, Hv]` (any float dtype; used at the accumulation precision),
/// beta `[B, T, Hv]`, optional initial state `[B, Hv, dk, dv]`. Returns the output (v's dtype)
/// and the final state (accumulation dtype).
pub fn gated_delta_rule(
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
    poison: bool,
) -> Result<(Tensor, Tensor)> {
    gated_delta_rule_using(RuleKernel::Default, x, initial_state, poison)
}

/// [`gated_delta_rule`] with the kernel choice made by the caller (the bench times both).
pub fn gated_delta_rule_using(
    kernel: RuleKernel,
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
    poison: bool,
) -> Result<(Tensor, Tensor)> {
    let d = check_delta_rule_shapes(NAME, x, initial_state)?;
    let DeltaInputs { q, k, v, g, beta } = x;
    dispatch_dtype!(
        v.dtype(),
        "CUDA kernels",
        rule_typed(q, k, v, g, beta, initial_state, d, poison, kernel)
    )
}

#[allow(clippy::too_many_arguments)]
fn rule_typed<T: Kernel>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
    d: GdnDims,
    poison: bool,
    kernel: RuleKernel,
) -> Result<(Tensor, Tensor)> {
    let acc = accumulation_dtype(T::DTYPE);
    let (q, k, v, beta) = (
        q.contiguous()?,
        k.contiguous()?,
        v.contiguous()?,
        beta.contiguous()?,
    );
    let g = g.to_dtype(acc)?.contiguous()?;
    let init = initial_state
        .map(|s| s.to_dtype(acc).and_then(|s| s.contiguous()))
        .transpose()?;
    if d.seq == 0 {
        return empty_seq::<T>(&d, v.device(), init);
    }
    let qi = Input::new(&q, "q")?;
    let ki = Input::new(&k, "k")?;
    let vi = Input::new(&v, "v")?;
    let gi = Input::new(&g, "g")?;
    let bi = Input::new(&beta, "beta")?;
    let ii = init
        .as_ref()
        .map(|s| Input::new(s, "initial state"))
        .transpose()?;
    let dev = vi.device()?;
    let iv = ii.as_ref().map(|i| i.view::<T::Acc>()).transpose()?;
    let (out, state) = run_rule::<T>(
        &dev,
        RuleArgs {
            q: qi.view()?,
            k: ki.view()?,
            v: vi.view()?,
            g: gi.view()?,
            beta: bi.view()?,
            init: iv,
            qk_stride: d.k_heads * d.k_dim,
            v_stride: d.v_heads * d.v_dim,
        },
        &d,
        poison,
        kernel,
    )?;
    Ok(rule_tensors(out, state, dev, &d))
}

fn empty_seq<T: Kernel>(
    d: &GdnDims,
    device: &candle_core::Device,
    init: Option<Tensor>,
) -> Result<(Tensor, Tensor)> {
    let (b, hv, dk, dv) = (d.batch, d.v_heads, d.k_dim, d.v_dim);
    let out = Tensor::zeros((b, 0, hv, dv), T::DTYPE, device)?;
    let state = match init {
        Some(s) => s.copy()?,
        None => Tensor::zeros((b, hv, dk, dv), accumulation_dtype(T::DTYPE), device)?,
    };
    Ok((out, state))
}

fn rule_tensors<T: Kernel>(
    out: CudaSlice<T>,
    state: CudaSlice<T::Acc>,
    dev: CudaDevice,
    d: &GdnDims,
) -> (Tensor, Tensor) {
    let (b, t, hv, dk, dv) = (d.batch, d.seq, d.v_heads, d.k_dim, d.v_dim);
    (
        wrap(out, dev.clone(), (b, t, hv, dv)),
        wrap(state, dev, (b, hv, dk, dv)),
    )
}

/// Device views of one delta-rule call. q/k rows are `qk_stride` elements apart and v rows
/// `v_stride` apart, so q/k/v may be column slices of one conv output.
struct RuleArgs<'a, T: Kernel> {
    q: CudaView<'a, T>,
    k: CudaView<'a, T>,
    v: CudaView<'a, T>,
    g: CudaView<'a, T::Acc>,
    beta: CudaView<'a, T>,
    init: Option<CudaView<'a, T::Acc>>,
    qk_stride: usize,
    v_stride: usize,
}

fn run_rule<T: Kernel>(
    dev: &CudaDevice,
    a: RuleArgs<'_, T>,
    d: &GdnDims,
    poison: bool,
    choice: RuleKernel,
) -> Result<(CudaSlice<T>, CudaSlice<T::Acc>)> {
    let (b, t, hk, hv, dk, dv) = (d.batch, d.seq, d.k_heads, d.v_heads, d.k_dim, d.v_dim);
    if b == 0 || hv == 0 || dk == 0 || dv == 0 || t == 0 {
        return Err(err(format!("empty delta-rule call {d:?}")));
    }
    // Every extent the kernel indexes must lie inside its buffer.
    let rows = b * t;
    let need = |what: &str, have: usize, want: usize| -> Result<()> {
        if have < want {
            Err(err(format!(
                "{what}: buffer of {have} elements, the kernel reads {want}"
            )))
        } else {
            Ok(())
        }
    };
    need("q", a.q.len(), (rows - 1) * a.qk_stride + hk * dk)?;
    need("k", a.k.len(), (rows - 1) * a.qk_stride + hk * dk)?;
    need("v", a.v.len(), (rows - 1) * a.v_stride + hv * dv)?;
    need("g", a.g.len(), rows * hv)?;
    need("beta", a.beta.len(), rows * hv)?;
    if let Some(i) = &a.init {
        need("initial state", i.len(), b * hv * dk * dv)?;
    }
    let tiles = dv.div_ceil(DVT);
    if hv > 65535 || b > 65535 {
        return Err(err(format!(
            "grid ({tiles}, {hv}, {b}) exceeds CUDA's limits"
        )));
    }
    let tc = uses_tensor_cores(choice, T::DTYPE, dk);
    let smem = if tc {
        gdn_tc_shared_bytes(dk)
    } else {
        gdn_shared_bytes::<T>(dk)
    };
    let ctx = dev.cuda_stream().context().clone();
    let max_smem = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .w()? as usize;
    if smem > max_smem {
        return Err(err(format!(
            "dk = {dk} needs {smem} B of shared memory per block; this GPU allows {max_smem}"
        )));
    }
    let kernel = delta_rule_kernel::<T>(choice, dk);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    func.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )
    .w()?;
    let mut out = alloc_out::<T>(dev, rows * hv * dv, poison)?;
    let mut state = alloc_out::<T::Acc>(dev, b * hv * dk * dv, poison)?;
    let null: u64 = 0;
    let (tt, hkk, hvv, dkk, dvv) = (
        i32_arg("seq", t)?,
        i32_arg("Hk", hk)?,
        i32_arg("Hv", hv)?,
        i32_arg("dk", dk)?,
        i32_arg("dv", dv)?,
    );
    let (qks, vs) = (a.qk_stride as i64, a.v_stride as i64);
    let scale = T::Acc::from_f64(1.0 / (dk as f64).sqrt());
    {
        let mut args = func.builder();
        args.arg(&a.q).arg(&a.k).arg(&a.v).arg(&a.g).arg(&a.beta);
        match &a.init {
            Some(i) => args.arg(i),
            None => args.arg(&null),
        };
        args.arg(&mut out).arg(&mut state);
        args.arg(&tt).arg(&hkk).arg(&hvv).arg(&dkk).arg(&dvv);
        args.arg(&qks).arg(&vs).arg(&scale);
        let cfg = LaunchConfig {
            grid_dim: (tiles as u32, hv as u32, b as u32),
            block_dim: (GDN_THREADS, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        launch(args, cfg, dev, &kernel)?;
    }
    Ok((out, state))
}

// --- the fused layer core ------------------------------------------------------------------

/// The fused core of a layer on the GPU: conv + SiLU of `mixed_qkv` `[B, T, C]` (one kernel),
/// then the delta rule reading q | k | v straight out of the conv output (strided, no split
/// copies). Returns (core `[B, T, Hv, dv]`, final state, conv output `[B, T, C]`).
pub fn fused_core(
    mixed_qkv: &Tensor,
    conv_weight: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
    d: &GdnDims,
    poison: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let conv = conv1d_silu(mixed_qkv, conv_weight, poison)?;
    if conv.dims() != [d.batch, d.seq, d.conv_dim()] {
        return Err(err(format!(
            "conv output {:?} does not match {d:?}",
            conv.dims()
        )));
    }
    let (core, state) = dispatch_dtype!(
        conv.dtype(),
        "CUDA kernels",
        core_typed(&conv, g, beta, initial_state, d, poison)
    )?;
    Ok((core, state, conv))
}

fn core_typed<T: Kernel>(
    conv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
    d: &GdnDims,
    poison: bool,
) -> Result<(Tensor, Tensor)> {
    let acc = accumulation_dtype(T::DTYPE);
    let (rows, hv) = (d.batch * d.seq, d.v_heads);
    for (name, x) in [("g", g), ("beta", beta)] {
        if x.dims() != [d.batch, d.seq, hv] {
            return Err(err(format!(
                "{name} must be [{}, {}, {hv}], got {:?}",
                d.batch,
                d.seq,
                x.dims()
            )));
        }
    }
    if beta.dtype() != T::DTYPE {
        return Err(err(format!(
            "beta dtype {:?} differs from the activations' {:?}",
            beta.dtype(),
            T::DTYPE
        )));
    }
    let g = g.to_dtype(acc)?.contiguous()?;
    let beta = beta.contiguous()?;
    let init = initial_state
        .map(|s| s.to_dtype(acc).and_then(|s| s.contiguous()))
        .transpose()?;
    if let Some(s) = &init
        && s.dims() != [d.batch, hv, d.k_dim, d.v_dim]
    {
        return Err(err(format!("initial state shape {:?}", s.dims())));
    }
    if rows == 0 {
        return empty_seq::<T>(d, conv.device(), init);
    }
    let ci = Input::new(conv, "conv output")?;
    let gi = Input::new(&g, "g")?;
    let bi = Input::new(&beta, "beta")?;
    let ii = init
        .as_ref()
        .map(|s| Input::new(s, "initial state"))
        .transpose()?;
    let dev = ci.device()?;
    let cv = ci.view::<T>()?;
    let key_dim = d.k_heads * d.k_dim;
    let iv = ii.as_ref().map(|i| i.view::<T::Acc>()).transpose()?;
    let (out, state) = run_rule::<T>(
        &dev,
        RuleArgs {
            q: cv.slice(0..),
            k: cv.slice(key_dim..),
            v: cv.slice(2 * key_dim..),
            g: gi.view()?,
            beta: bi.view()?,
            init: iv,
            qk_stride: d.conv_dim(),
            v_stride: d.conv_dim(),
        },
        d,
        poison,
        RuleKernel::Default,
    )?;
    Ok(rule_tensors(out, state, dev, d))
}

// --- timing (bench) ------------------------------------------------------------------------

/// GPU time of `f` in milliseconds, from CUDA events recorded around it on the device's stream.
pub fn time_ms(dev: &CudaDevice, f: impl FnOnce() -> Result<()>) -> Result<f64> {
    use candle_core::cuda_backend::cudarc::driver::sys::CUevent_flags;
    let stream = dev.cuda_stream();
    let start = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .w()?;
    f()?;
    let end = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .w()?;
    end.synchronize().w()?;
    Ok(start.elapsed_ms(&end).w()? as f64)
}

/// Device-to-device copy bandwidth in GB/s (read + write bytes over time), median of `reps`
/// copies of `bytes` bytes.
pub fn copy_bandwidth_gbs(dev: &CudaDevice, bytes: usize, reps: usize) -> Result<f64> {
    let n = bytes / 4;
    let src = dev.alloc_zeros::<f32>(n)?;
    let mut dst = dev.alloc_zeros::<f32>(n)?;
    let mut times = Vec::with_capacity(reps);
    for i in 0..reps + 2 {
        let ms = time_ms(dev, || Ok(dev.memcpy_dtod(&src, &mut dst)?))?;
        if i >= 2 {
            times.push(ms);
        }
    }
    times.sort_by(f64::total_cmp);
    let ms = times[times.len() / 2];
    Ok(2.0 * (n * 4) as f64 / (ms * 1e-3) / 1e9)
}
