"""Training the cross-encoder re-ranker by sequential transfer (`faq train reranker`).

Phase A, binary equivalence (BCE on the logit) on paraphrase pairs:
  - labelled pair files (`--pairs`: QQP `qqp_bimpm/dev.tsv`, MRPC train; never MRPC test, whose
    sentences are in STS-B's MSRpar part, as the STS-B readme warns);
  - intent KBs (`--kb`): variants of one faq_id are paraphrases; each sampled anchor gets one positive
    (another variant of its FAQ) and one hard negative (its all-MiniLM-L6-v2 nearest neighbour among
    the other FAQs' sampled variants);
  - rule-based minimal edits (`augment`, ours, not in the paper): training sentences with one word or
    phrase changed by the stress suite's perturbation types (negation, increase/decrease, comparative,
    also with its two sides swapped, quantifier, modal, direction, number, role swap of two noun
    phrases) as negatives, and meaning-preserving rewrites (contractions, synonyms, the converse
    comparative, "A and B" -> "B and A", punctuation) as positives, so the model learns that one
    flipped word can change the answer but a reworded question does not. No stress-suite pair is used.
Phase B, STS-B regression: MSE between sigmoid(STS logit) and score / 5 (raw `sts-train.csv`).
  - default (`sts_head`, ours): a separate regression head, and every STS-B batch is followed by a
    rehearsal batch of phase A pairs on the match head, so the encoder keeps what phase A taught it.
    Measured here with the paper's single head, phase B took the stress suite from 0.750 (after
    phase A) to 0.597 (= always "different"): STS-B rates "increase" vs "decrease" as half similar.
  - `sts_head=False` (the paper's recipe): the phase A head itself becomes the regression head.
Then `p = sigmoid(a * logit + b)` is fitted on the held-out binary pairs (a `holdout_fraction` of
every pair file and of the KB anchors, never trained on; written to `heldout_pairs.tsv` for
threshold tuning), the folder is saved and exported to ONNX (fp32 + int8).

Modules: `data` (pair files, STS-B, KB pairs, the pair files a run writes), `edits` (the rule-based
minimal edits), `trainer` (config, `RerankTrainer` on training/loop.py: budget, checkpoints, chunks;
`train_reranker`). The names other packages use are importable from here.
"""
from training.cross_encoder.data import LabelledPair, read_stsb, read_written_pairs
from training.cross_encoder.edits import augmentation_pairs, perturb, reword
from training.cross_encoder.trainer import (
    HELDOUT_FILE,
    PAIRS_A_FILE,
    RerankTrainConfig,
    RerankTrainer,
    build_phase_a,
    pearson_spearman,
    train_reranker,
)

__all__ = [
    "HELDOUT_FILE", "PAIRS_A_FILE", "LabelledPair", "RerankTrainConfig", "RerankTrainer", "augmentation_pairs",
    "build_phase_a", "pearson_spearman", "perturb", "read_stsb", "read_written_pairs", "reword", "train_reranker",
]
