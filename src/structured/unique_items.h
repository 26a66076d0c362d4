// UniqueItemsTracker: the items written so far into JSON arrays whose items must be distinct
// (uniqueItems), so that the token mask can refuse a token that would complete an item equal
// to an earlier one.
//
// NOTE: "all items distinct" is not a context-free property, so the grammar does not hold it.
// It marks the '[' of such arrays (Grammar::opens_unique_array) and otherwise accepts any
// items; the ConstraintProcessor feeds every byte it accepts into this tracker, a small JSON
// lexer with a stack of open containers that keeps, for each open unique array, the items
// written so far as canonical keys; an array or object inside an item collects its members'
// keys until it closes and becomes a key itself. Before each step it asks, for the few tokens the
// grammar allows that could complete an item (see ConstraintProcessor::Process), whether the token
// would complete a duplicate, and masks those.
//
// Items are compared as JSON values, as JSON Schema asks, not as text: strings by their decoded
// code points ("\u0061" equals "a"), numbers by value (1, 1.0 and 1e0 are one value). Numbers
// are compared as doubles (integers beyond 2^53 that round to the same double count as equal),
// so the tracker may refuse a valid item there but never lets a duplicate through; arrays by
// their items in order, objects by their members in any order.
//
// Contract: one tracker per sequence (not thread-safe). Feed bytes in output order; the output
// is JSON (possibly inside a tool-call wrapper: bytes outside strings that are not JSON are
// skipped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace kvserve::structured {

class UniqueItemsTracker {
 public:
  // One byte of output. `opens_unique`: the byte is a '[' that the grammar marks as opening a
  // unique array (ignored for other bytes). False when the byte completes an item equal to an
  // earlier item of its unique array (the byte is taken all the same).
  bool Feed(uint8_t byte, bool opens_unique);
  // Whether writing `bytes` next would complete a duplicate item in a unique array, including
  // arrays the bytes themselves open (each of which counts as unique: the grammar state at their
  // '[' is not known here, so the answer errs towards refusing).
  bool CompletesDuplicate(std::string_view bytes) const {
    return Trial(bytes) == TrialOutcome::kDuplicate;
  }
  // CompletesDuplicate in more detail: kAtRisk where the bytes leave an item unfinished whose
  // value so far already is an earlier item (a number or word that a next byte would end, a
  // string that a next '"' would), so that whether the bytes lead anywhere depends on what the
  // grammar allows next (ConstraintProcessor looks one byte ahead).
  enum class TrialOutcome { kFine, kAtRisk, kDuplicate };
  TrialOutcome Trial(std::string_view bytes) const;

  // In a unique array: for each earlier item that the item so far begins (a string's text, a
  // plain integer's digits, a word; at an item's start any item but an array or object), the
  // bytes that would make the two equal (spelt plainly; none where an escape would be needed).
  // The tokens spelling them may be kAtRisk though they hold no byte that ends an item.
  std::vector<std::string> Remainders() const;

  // Whether the innermost open container is a unique array (an item in progress or next).
  bool InUniqueArray() const { return !frames_.empty() && frames_.back().unique; }
  // Whether the innermost open container is part of an item of a unique array (the item ends
  // only where a ']' or '}' closes it).
  bool InItem() const { return !frames_.empty() && frames_.back().captured; }
  // Whether a string is open (an item or a key).
  bool InString() const {
    return lex_.mode == Mode::kString || lex_.mode == Mode::kEscape || lex_.mode == Mode::kHex;
  }

 private:
  enum class Mode : uint8_t { kStructure, kString, kEscape, kHex, kNumber, kWord };
  // The scalar being written: its mode and text so far (a string's decoded bytes; a number's or
  // word's raw bytes).
  struct Lexer {
    Mode mode = Mode::kStructure;
    std::string text;
    uint32_t hex = 0;    // kHex: the code unit so far
    int hex_digits = 0;  // kHex: digits read
    uint32_t high = 0;   // a high surrogate waiting for its low half (0: none)
  };
  struct Frame {
    bool array = false;
    bool unique = false;
    bool captured = false;                  // inside an item of a unique array
    std::unordered_set<std::string> items;  // canonical keys (unique arrays only)
    std::vector<std::string> parts;         // captured: the members' keys so far, in order
  };
  // What the lexer reports, one event at a time, to a Sink (the tracker itself, or a trial).
  template <class Sink>
  static bool Step(Lexer* lex, uint8_t byte, bool opens_unique, Sink* sink);
  template <class Sink>
  static bool Complete(Lexer* lex, Sink* sink);
  // A scalar's canonical key: "s" + decoded bytes, "n" + the number's value, "w" + the word.
  static std::string Key(const Lexer& lex);
  // A closed container's key from its members' keys (an object's as key/value pairs, sorted).
  static std::string ContainerKey(bool array, std::vector<std::string> parts);
  static void AppendCodeUnit(Lexer* lex, uint32_t unit);

  // The tracker as a Sink.
  bool OnValue(const std::string& key);
  void OnOpen(bool array, bool unique);
  bool OnClose();
  friend struct TrialSink;

  Lexer lex_;
  std::vector<Frame> frames_;
};

}  // namespace kvserve::structured
