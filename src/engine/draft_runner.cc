#include "engine/draft_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "sample/sampler.h"
#include "util/check.h"

namespace kvserve {

DraftRunner::DraftRunner(std::unique_ptr<Model> model, KvStorage kv,
                         std::unique_ptr<KvCacheManager> manager)
    : model_(std::move(model)), kv_(std::move(kv)), manager_(std::move(manager)) {}

Result<std::unique_ptr<DraftRunner>> DraftRunner::Create(const std::string& path,
                                                         const Model& target,
                                                         const EngineConfig& config,
                                                         int num_blocks, int max_drafts) {
  auto file = GgufFile::Open(path, /*populate=*/true);
  if (!file.ok()) {
    return InvalidArgument(fmt::format("draft model '{}': {}", path, file.status().message()));
  }
  ModelOptions mo;
  mo.max_batch_tokens = target.max_batch_tokens();
  mo.max_context = 0;
  auto model = Model::Load(std::move(file).value(), mo);
  if (!model.ok()) {
    return InvalidArgument(fmt::format("draft model '{}': {}", path, model.status().message()));
  }
  if ((*model)->config().vocab != target.config().vocab) {
    return InvalidArgument(fmt::format(
        "draft model '{}' has a vocabulary of {} tokens, the target {}: they must share one",
        path, (*model)->config().vocab, target.config().vocab));
  }
  if ((*model)->max_context() < target.max_context()) {
    return InvalidArgument(fmt::format(
        "draft model '{}' has a context of {} tokens, less than the target's {}", path,
        (*model)->max_context(), target.max_context()));
  }
  const KvLayout layout =
      (*model)->MakeKvLayout(config.block_size, KvDtype::kF16, KvDtype::kF16);
  const int blocks = num_blocks + std::max(config.max_num_seqs, 1) *
                                      ((max_drafts + config.block_size - 1) / config.block_size + 1);
  KvStorage kv(layout, blocks);
  auto manager = std::make_unique<KvCacheManager>(
      KvCacheConfig{blocks, config.block_size, config.enable_prefix_caching,
                    EvictionPolicyKind::kLru, 0.0, config.partial_block_hits});
  std::unique_ptr<DraftRunner> r(
      new DraftRunner(std::move(model).value(), std::move(kv), std::move(manager)));
  KvStorage* storage = &r->kv_;
  r->manager_->set_block_copier([storage](BlockId src, BlockId dst) { storage->CopyBlock(src, dst); });
  return r;
}

void DraftRunner::Release(SeqId seq) {
  if (seqs_.erase(seq)) manager_->EndSequence(seq);
}

Status DraftRunner::Propose(std::span<DraftJob> jobs, ThreadPool& pool) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  int budget = model_->max_batch_tokens();
  // Depth 0: catch up (and the first draft where the catch-up completes).
  ForwardBatch batch;
  std::vector<size_t> drafting;  // jobs that draft this step, in logits-row order
  for (size_t i = 0; i < jobs.size(); ++i) {
    DraftJob& job = jobs[i];
    job.drafts.clear();
    const int len = static_cast<int>(job.tokens.size());
    if (job.k <= 0 || budget <= 0) continue;
    auto it = seqs_.find(job.seq);
    if (it == seqs_.end()) {
      const int cached = manager_->BeginSequence(job.seq, job.ns, job.tokens, /*priority=*/0);
      it = seqs_.emplace(job.seq, SeqState{}).first;
      it->second.fed.assign(job.tokens.begin(), job.tokens.begin() + cached);
    }
    std::vector<TokenId>& fed = it->second.fed;
    // Slots past the first mismatch hold rejected drafts: recompute from there.
    const size_t common = static_cast<size_t>(
        std::mismatch(fed.begin(), fed.end(), job.tokens.begin(), job.tokens.end()).first -
        fed.begin());
    fed.resize(std::min(common, job.tokens.size() - 1));
    const int done = static_cast<int>(fed.size());
    const int chunk = std::min(len - done, budget);
    const bool complete = done + chunk == len;
    if (!manager_->Allocate(job.seq, done + chunk + (complete ? job.k - 1 : 0))) {
      Release(job.seq);  // no room: no drafts for it this step
      continue;
    }
    batch.AddSequence(manager_->block_table(job.seq), done,
                      job.tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(chunk)),
                      complete);
    fed.insert(fed.end(), job.tokens.begin() + done, job.tokens.begin() + done + chunk);
    budget -= chunk;
    if (complete) drafting.push_back(i);
  }
  if (batch.seqs.empty()) return Status::Ok();
  if (logits_.size() < jobs.size() * vocab) logits_.resize(jobs.size() * vocab);
  KV_RETURN_IF_ERROR(model_->Forward(batch, kv_, pool, logits_.data()));
  for (size_t r = 0; r < drafting.size(); ++r) {
    jobs[drafting[r]].drafts.push_back(
        Argmax(std::span<const float>(logits_.data() + r * vocab, vocab)));
  }
  for (DraftJob& job : jobs) {
    auto it = seqs_.find(job.seq);
    if (it == seqs_.end()) continue;
    const int done = std::min(static_cast<int>(it->second.fed.size()),
                              static_cast<int>(job.tokens.size()));
    manager_->Commit(job.seq, job.tokens, done);
  }
  // Depths 1..: feed the previous draft of every job that wants more.
  for (int depth = 1;; ++depth) {
    ForwardBatch b;
    std::vector<size_t> rows;
    for (size_t i : drafting) {
      DraftJob& job = jobs[i];
      if (static_cast<int>(job.drafts.size()) != depth || depth >= job.k) continue;
      std::vector<TokenId>& fed = seqs_.at(job.seq).fed;
      const TokenId prev = job.drafts.back();
      b.AddSequence(manager_->block_table(job.seq), static_cast<int>(fed.size()),
                    std::span<const TokenId>(&prev, 1), true);
      fed.push_back(prev);
      rows.push_back(i);
    }
    if (rows.empty()) break;
    const auto t0 = std::chrono::steady_clock::now();
    KV_RETURN_IF_ERROR(model_->Forward(b, kv_, pool, logits_.data()));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    depth_seconds_ = depth_seconds_ > 0 ? 0.8 * depth_seconds_ + 0.2 * s : s;
    for (size_t r = 0; r < rows.size(); ++r) {
      jobs[rows[r]].drafts.push_back(
          Argmax(std::span<const float>(logits_.data() + r * vocab, vocab)));
    }
  }
  return Status::Ok();
}

}  // namespace kvserve
