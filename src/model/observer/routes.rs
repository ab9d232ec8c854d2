//! Forced routing: another run's router choices, per MoE layer.

/// Another run's router choices, per MoE layer: a forward told to use them computes its own
/// router probabilities but routes every token to the experts given here (a token given none
/// to the router's own choice).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    layers: std::collections::BTreeMap<usize, Vec<Vec<u32>>>,
}

impl Routes {
    pub fn insert(&mut self, layer: usize, experts: Vec<Vec<u32>>) {
        self.layers.insert(layer, experts);
    }

    pub fn get(&self, layer: usize) -> Option<&[Vec<u32>]> {
        self.layers.get(&layer).map(Vec::as_slice)
    }

    /// The layers routed, ascending.
    pub fn layers(&self) -> impl Iterator<Item = usize> + '_ {
        self.layers.keys().copied()
    }

    /// The first layer at which runs routed by `a` and by `b` (None: their own routers) route
    /// apart — one forces it and the other does not, or both force it otherwise; None when they
    /// route alike everywhere. Up to that layer the two runs compute the same.
    pub fn first_difference(a: Option<&Routes>, b: Option<&Routes>) -> Option<usize> {
        let forced = |l: usize| (a.and_then(|r| r.get(l)), b.and_then(|r| r.get(l)));
        (a.into_iter().chain(b))
            .flat_map(Routes::layers)
            .filter(|&l| {
                let (x, y) = forced(l);
                x != y
            })
            .min()
    }
}
