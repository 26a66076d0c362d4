// DraftRunner: the draft model of speculative decoding (method "draft_model"). A second GGUF
// with the target's vocabulary, run on the engine's thread pool with its own paged KV cache and
// prefix cache (its own namespaces, so nothing mixes with the target's), drafting greedily.
//
// Each step the engine hands it the speculating sequences (their tokens so far and how many
// drafts each may have). For each it first catches the draft's KV up with the sequence: the
// draft's slots that no longer match the tokens (rejected drafts) are simply recomputed, and a
// sequence new to it starts from its prefix cache. Then it drafts depth by depth, one batched
// Forward per depth for every sequence still drafting. A sequence whose catch-up does not fit in
// this step's batch (a long prompt seen for the first time) catches up over several steps and
// gets no drafts until it has.
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "kv/kv_storage.h"
#include "kvserve/status.h"
#include "model/model.h"
#include "prefix/kv_cache_manager.h"
#include "util/thread_pool.h"

namespace kvserve {

struct DraftJob {
  SeqId seq;
  CacheNamespace ns;                // the draft's namespace for the request's cache salt
  std::span<const TokenId> tokens;  // the sequence's tokens; the last one is not computed yet
  int k = 0;                        // most drafts wanted
  std::vector<TokenId> drafts;      // out
};

class DraftRunner {
 public:
  // Loads the draft GGUF at `path`. InvalidArgument when its vocabulary differs from the
  // target's. The draft's cache has as many blocks as the target's, plus room for the drafts.
  static Result<std::unique_ptr<DraftRunner>> Create(const std::string& path, const Model& target,
                                                     const EngineConfig& config, int num_blocks,
                                                     int max_drafts);

  Status Propose(std::span<DraftJob> jobs, ThreadPool& pool);
  // Forgets a sequence (finished, cancelled, preempted); its committed blocks stay cached.
  void Release(SeqId seq);
  // Seconds of one draft depth (one token for each sequence drafting), exponentially averaged;
  // 0 before the first.
  double depth_seconds() const { return depth_seconds_; }
  const Model& model() const { return *model_; }
  const KvCacheManager& kv_manager() const { return *manager_; }
  int num_live() const { return static_cast<int>(seqs_.size()); }
  void CheckInvariants() const { manager_->CheckInvariants(); }

 private:
  struct SeqState {
    std::vector<TokenId> fed;  // tokens whose K/V the draft's slots hold, in order
  };
  DraftRunner(std::unique_ptr<Model> model, KvStorage kv, std::unique_ptr<KvCacheManager> manager);

  std::unique_ptr<Model> model_;
  KvStorage kv_;
  std::unique_ptr<KvCacheManager> manager_;
  std::unordered_map<SeqId, SeqState> seqs_;
  std::vector<float> logits_;
  double depth_seconds_ = 0;
};

}  // namespace kvserve
