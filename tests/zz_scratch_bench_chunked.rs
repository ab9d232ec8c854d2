use candle_core::{DType, Device, Tensor};
use hsdiff::backends::backend_by_name;
#[test]
fn bench() {
    let dev = Device::Cpu;
    let (b, t, hk, hv, dk, dv) = (1, 1024, 16, 32, 128, 128);
    let q = Tensor::randn(0f32, 1., (b, t, hk, dk), &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let k = Tensor::randn(0f32, 1., (b, t, hk, dk), &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let v = Tensor::randn(0f32, 1., (b, t, hv, dv), &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let g = (Tensor::rand(0f32, 1., (b, t, hv), &dev).unwrap() * -1.0).unwrap();
    let beta = Tensor::rand(0f32, 1., (b, t, hv), &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    for name in ["chunked", "reference"] {
        let be = backend_by_name(name, &dev).unwrap();
        let t0 = std::time::Instant::now();
        let (o, _) = be.gated_delta_rule(&q, &k, &v, &g, &beta, None).unwrap();
        eprintln!("{name}: {:?} {:?}", t0.elapsed(), o.dims());
    }
}
