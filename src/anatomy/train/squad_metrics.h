// squad_metrics.h: question answering metrics, as the official SQuAD evaluation
// scripts compute them: evaluate-v1.1.py (which evaluate.load("squad") runs for
// run_qa.py) and evaluate-v2.0.py (evaluate.load("squad_v2"), with
// --version_2_with_negative).
//
// normalize_answer lowercases (Python's str.lower(): full mappings, U+0130 to
// "i̇", and the final sigma), removes the ASCII punctuation of string.punctuation,
// replaces the words "a", "an" and "the" by a space (re's \b(a|an|the)\b, where a
// word is a run of the characters re counts as \w: letters, digits, numeric
// characters and '_', not combining marks), and joins the words that str.split()
// finds (split at White_Space and U+001C..U+001F) with single spaces. Exact is
// whether two normalized answers are equal; F1 the harmonic mean of token
// precision and recall over the bag of words.
//
// Unicode: lowercase and White_Space are the tokenizer's tables
// (data/wordpiece_unicode.h, Unicode 16.0); \w, Case_Ignorable and Cased are a
// table of Python 3.13 (Unicode 15.1). Python ≤ 3.13 itself lowercases only the
// characters of its own Unicode: the characters assigned in Unicode 16.0 that
// have a lowercase (the Garay capitals, U+1C89, a few Latin letters) are lowercased here as Python
// 3.14 would.
//
// Numbers: v2.0's totals are Python's sum() over int and float scores, added as
// CPython 3.12 and 3.13 add them (compensated floats); Python 3.11 and earlier
// (plain) and 3.14 (ints compensated too) can differ in the last bits.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anatomy {

// The answer as normalize_answer leaves it. Fails on text that is not UTF-8.
std::string squad_normalize_answer(std::string_view text);

// 1 when the normalized answers are equal, else 0 (both scripts).
double squad_exact(std::string_view gold, std::string_view prediction);

// Token F1 of `prediction` against `gold`. version 1: f1_score of v1.1, which
// gives 0 when no token is shared (both empty included); version 2: compute_f1
// of v2.0, which gives 1 when both are empty and 0 when only one is.
double squad_f1(std::string_view gold, std::string_view prediction, int version);

// A question: its id and its gold answers' texts (none: unanswerable, in v2.0).
struct SquadQuestion {
  std::string id;
  std::vector<std::string> answers;
};

// The script's output, under its keys:
//   v1.1: exact_match, f1 (percentages over all questions);
//   v2.0: exact, f1, total; HasAns_exact, HasAns_f1, HasAns_total when some
//   question has answers; NoAns_exact, NoAns_f1, NoAns_total when some has
//   none; best_exact, best_exact_thresh, best_f1, best_f1_thresh with
//   no-answer probabilities.
struct SquadResult {
  std::map<std::string, double> scores;
  // v1.1: the questions without a prediction, in order, each scored 0 (the
  // script prints "Unanswered question <id> will receive score 0." for each).
  std::vector<std::string> unanswered;
};

// evaluate-v1.1.py: each question (a repeated id counts again) scores the
// best exact match and F1 over its answers; a question without a prediction
// scores 0; predictions of no question are ignored. Fails where the script
// does: no questions, or a question with no answers.
SquadResult squad_v1(const std::vector<SquadQuestion>& questions,
                     const std::map<std::string, std::string>& predictions);

// evaluate-v2.0.py. Gold answers that normalize to "" are dropped and a question
// left with none has the gold answer "" (yet counts as HasAns when it had
// answers). Scores are per distinct id (a repeated id: its last question, at its
// first place). With `na_probs` (id → probability of no answer, in the order of
// na_prob.json, which breaks ties), a question whose probability exceeds
// `na_prob_thresh` scores 1 if unanswerable, else 0; best_* sweep the threshold
// over the probabilities (find_best_thresh). Without them every probability is
// 0 and best_* are absent. Predictions of no question are ignored. Fails where
// the script does: no questions, a question without a prediction (the script
// prints "Missing prediction" and then fails on the HasAns/NoAns sums), a
// predicted question without a probability; and on a repeated id or a NaN in
// `na_probs`.
SquadResult squad_v2(const std::vector<SquadQuestion>& questions,
                     const std::map<std::string, std::string>& predictions,
                     const std::vector<std::pair<std::string, double>>* na_probs = nullptr,
                     double na_prob_thresh = 1.0);

}  // namespace anatomy
