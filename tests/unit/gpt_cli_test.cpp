// A language model end to end as a user runs it: `tessera data prepare` on a small text,
// `tessera train` of a tiny gpt on it, then `tessera sample` from the checkpoint; and what the
// sampler refuses (a checkpoint of another shape, a model that is not a language model); a model
// trained with dropout samples without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::CliRun;

class GptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-gpt-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `tessera ARGS` in the scratch folder, stdout and stderr captured.
  CliRun tessera(const std::string& args) { return testing::run_cli(TESSERA_CLI_PATH, dir_, args); }

  // A text of short repeated sentences, its token file, and a config training a gpt of one
  // block on it for 60 steps with a checkpoint at the end; `flags` are added to the training.
  void prepare_and_train(const std::string& flags = "") {
    {
      std::ofstream text(dir_ / "story.txt", std::ios::binary);
      for (int i = 0; i < 300; ++i) text << "the cat sat on the mat. the dog ran to the house.\n";
    }
    const CliRun prepare = tessera("data prepare story.txt --output story.tokens");
    ASSERT_EQ(prepare.exit_code, 0) << prepare.err;
    std::ofstream ini(dir_ / "gpt.ini");
    ini << "[runtime]\ntransport = local\nworld_size = 1\n"
           "[train]\nstrategy = ddp\nmodel = gpt\noptimizer = adam\ndataset = text\n"
           "epochs = 10\nmax_steps = 60\nbatch_size = 8\nlr = 0.01\nseed = 3\n"
           "checkpoint_dir = checkpoints\nprogress = off\neval_samples = 16\n"
           "[model.gpt]\nlayers = 1\nheads = 2\nwidth = 16\ncontext = 12\n"
           "[dataset.text]\npath = story.tokens\ncontext = 12\n";
    ini.close();
    train_ = tessera("train --config gpt.ini " + flags);
    const CliRun& train = train_;
    ASSERT_EQ(train.exit_code, 0) << train.err;
    EXPECT_NE(train.out.find("perplexity"), std::string::npos) << train.out;
    EXPECT_NE(train.out.find("bits/byte"), std::string::npos) << train.out;
    EXPECT_NE(train.out.find("tokens/s"), std::string::npos) << train.out;
  }

  fs::path dir_;
  CliRun train_;  // of prepare_and_train
};

TEST_F(GptCli, ATrainedModelContinuesAPromptTheSameWayForTheSameSeed) {
  prepare_and_train();
  const std::string sample =
      "sample --config gpt.ini --checkpoint checkpoints --prompt 'the cat ' --tokens 40 ";
  const CliRun greedy = tessera(sample + "--temperature 0");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  ASSERT_EQ(greedy.out.size(), std::string("the cat ").size() + 40 + 1) << greedy.out;
  EXPECT_EQ(greedy.out.substr(0, 8), "the cat ");
  // 60 steps on one repeated pair of sentences: the continuation uses the text's own letters.
  for (const char c : greedy.out.substr(8, 40)) {
    EXPECT_NE(std::string("abcdefghijklmnopqrstuvwxyz .\n").find(c), std::string::npos)
        << "byte " << static_cast<int>(static_cast<unsigned char>(c)) << " in " << greedy.out;
  }
  EXPECT_NE(greedy.err.find("from the checkpoint of step 60"), std::string::npos) << greedy.err;
  const CliRun drawn = tessera(sample + "--temperature 1 --top-k 0 --seed 5");
  const CliRun again = tessera(sample + "--temperature 1 --top-k 0 --seed 5");
  ASSERT_EQ(drawn.exit_code, 0) << drawn.err;
  EXPECT_EQ(drawn.out, again.out);
}

// Dropout is for training: a model trained with it samples the same text whether the config
// still says dropout = 0.2 or 0 (sampling draws no mask), and a rate of 1 (or, for
// attention_dropout, a word) is refused naming the option before anything trains.
TEST_F(GptCli, AModelTrainedWithDropoutSamplesWithoutIt) {
  prepare_and_train("--model.gpt.dropout=0.2");
  const std::string sample =
      "sample --config gpt.ini --checkpoint checkpoints --prompt 'the cat ' --tokens 40 "
      "--temperature 0 ";
  const CliRun configured = tessera(sample + "--model.gpt.dropout=0.2");
  const CliRun off = tessera(sample + "--model.gpt.dropout=0");
  ASSERT_EQ(configured.exit_code, 0) << configured.err;
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(configured.out, off.out);

  const CliRun refused = tessera("train --config gpt.ini --model.gpt.dropout=1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("model.gpt.dropout: 1 is not a rate in [0, 1)"), std::string::npos)
      << refused.err;
  const CliRun attention = tessera("train --config gpt.ini --model.gpt.attention_dropout=1");
  EXPECT_NE(attention.exit_code, 0);
  EXPECT_NE(attention.err.find("model.gpt.attention_dropout: 1 is not a rate in [0, 1)"),
            std::string::npos)
      << attention.err;
  const CliRun word = tessera("train --config gpt.ini --model.gpt.attention_dropout=half");
  EXPECT_NE(word.exit_code, 0);
  EXPECT_NE(word.err.find("model.gpt.attention_dropout: 'half' is not a number"), std::string::npos)
      << word.err;
}

TEST_F(GptCli, ACheckpointOfAnotherShapeIsRefusedNamingTheParameter) {
  prepare_and_train();
  const CliRun run =
      tessera("sample --config gpt.ini --checkpoint checkpoints --model.gpt.width=32 --tokens 5");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("holds 0.wte [256x16], the model's wte is 256x32; sample with the [model] "
                         "options it was trained with"),
            std::string::npos)
      << run.err;
}

// The head tied to wte (the default) is one parameter: the checkpoint lists wte once and no
// lm_head.weight; consolidate counts 16 parameters of 7,600 elements (wte 256 x 16, wpe 12 x 16,
// the block's 3,280, ln_f 32; an untied head would add a 17th of 4,096).
TEST_F(GptCli, TheTiedHeadIsOneCheckpointEntryCountedOnce) {
  prepare_and_train();
  const CliRun inspect = tessera("checkpoint inspect checkpoints");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("parameter 0.wte [256x16]"), std::string::npos) << inspect.out;
  EXPECT_EQ(inspect.out.find("lm_head"), std::string::npos) << inspect.out;
  const CliRun consolidate = tessera("checkpoint consolidate checkpoints whole");
  ASSERT_EQ(consolidate.exit_code, 0) << consolidate.err;
  EXPECT_NE(consolidate.out.find("16 parameters of 7600 elements"), std::string::npos)
      << consolidate.out;
}

// Two ranks of hybrid with tensor_parallel = 2 (threads over `local`) split each block by heads
// and wte (with the tied head) by vocabulary; rank 0 prints the plan; the checkpoint's c_attn
// rows, written as one box per rank and per Q, K and V, and wte's, one box of 128 rows per rank,
// consolidate into one rank's checkpoint that samples exactly as the original does.
TEST_F(GptCli, ATensorParallelRunPrintsItsPlanAndItsCheckpointConsolidatesToTheSameModel) {
  prepare_and_train(
      "--train.strategy=hybrid --runtime.world_size=2 --strategy.hybrid.tensor_parallel=2");
  EXPECT_NE(train_.err.find("hybrid: tensor-parallel plan over 2 tensor ranks"), std::string::npos)
      << train_.err;
  EXPECT_NE(train_.err.find("h.0.block             as a column/row pair inside the layer"),
            std::string::npos)
      << train_.err;
  const CliRun inspect = tessera("checkpoint inspect checkpoints");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(train_.err.find("embedding             vocabulary-parallel"), std::string::npos)
      << train_.err;
  EXPECT_NE(train_.err.find("lm_head               vocabulary-parallel"), std::string::npos)
      << train_.err;
  // Rank 1's head of K (2 heads of 8 channels): rows [24, 32) of c_attn's [Q; K; V] 48.
  EXPECT_NE(inspect.out.find("rank 1  values  dim 0 [24, 32) elements [0, 128)"), std::string::npos)
      << inspect.out;
  // Rank 1's rows of wte: tokens [128, 256) of 16 channels.
  EXPECT_NE(inspect.out.find("rank 1  values  dim 0 [128, 256) elements [0, 2048)"),
            std::string::npos)
      << inspect.out;
  const CliRun consolidate = tessera("checkpoint consolidate checkpoints whole");
  ASSERT_EQ(consolidate.exit_code, 0) << consolidate.err;
  EXPECT_NE(consolidate.out.find("16 parameters of 7600 elements"), std::string::npos)
      << consolidate.out;
  const std::string sample =
      "sample --config gpt.ini --prompt 'the dog ' --tokens 30 --temperature 0 ";
  const CliRun original = tessera(sample + "--checkpoint checkpoints");
  const CliRun consolidated = tessera(sample + "--checkpoint whole");
  ASSERT_EQ(original.exit_code, 0) << original.err;
  ASSERT_EQ(consolidated.exit_code, 0) << consolidated.err;
  EXPECT_EQ(consolidated.out, original.out);
  EXPECT_EQ(original.out.size(), std::string("the dog ").size() + 30 + 1) << original.out;
}

// A checkpoint of a head of its own (tie_embeddings = false) sampled with the tied model would
// silently use wte for the head: refused, naming the parameter and the option.
TEST_F(GptCli, AnUntiedCheckpointSampledWithTheTiedHeadIsRefusedNamingTheOption) {
  prepare_and_train("--model.gpt.tie_embeddings=false");
  const CliRun run = tessera("sample --config gpt.ini --checkpoint checkpoints --tokens 5");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("holds 3.lm_head.weight [256x16], which this model does not have"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("tie_embeddings = false"), std::string::npos) << run.err;
  const CliRun untied = tessera(
      "sample --config gpt.ini --checkpoint checkpoints --tokens 5 "
      "--model.gpt.tie_embeddings=false");
  EXPECT_EQ(untied.exit_code, 0) << untied.err;
}

// Resuming training from it with the tied model is refused naming the head's parameter.
TEST_F(GptCli, AnUntiedCheckpointResumedWithTheTiedHeadIsRefusedNamingTheParameter) {
  prepare_and_train("--model.gpt.tie_embeddings=false");
  const CliRun run = tessera("train --config gpt.ini --resume --train.max_steps=70");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("its parameter 16 is 3.lm_head.weight [256x16], the model's missing; "
                         "load it into the model built with the [model] options it was written "
                         "with"),
            std::string::npos)
      << run.err;
}

TEST_F(GptCli, AModelThatIsNotALanguageModelIsRefused) {
  std::ofstream ini(dir_ / "mlp.ini");
  ini << "[train]\nmodel = mlp\n";
  ini.close();
  fs::create_directories(dir_ / "empty");
  const CliRun run = tessera("sample --config mlp.ini --checkpoint empty");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("tessera sample needs a language model (token ids in, the next token "
                         "out)"),
            std::string::npos)
      << run.err;
}

}  // namespace
}  // namespace tessera
