// torch_checkpoint.cpp: torch.save's zip archive, its data.pkl read by a
// restricted unpickler that builds values in an arena and calls nothing, and
// the tensors it describes as a safetensors-like view of the file's bytes.
#include "anatomy/io/torch_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/zip_archive.h"

namespace anatomy::io {

static_assert(std::endian::native == std::endian::little, "torch checkpoint reading assumes a little-endian host");

namespace {

constexpr const char* kConvertHint = "re-save it with torch.save or convert it to safetensors";
// A state dict's pickle makes a few dozen values per tensor; this bounds the
// memory a hostile data.pkl can make the reader use.
constexpr size_t kMaxValues = 10'000'000;

// The callables and classes data.pkl may name.
enum class Global { OrderedDict, RebuildTensorV2, RebuildTensor, RebuildParameter, RebuildParameterWithState, Storage };

struct StorageClass {
  std::string_view name;  // in module torch
  StDType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", StDType::F32}, {"DoubleStorage", StDType::F64}, {"HalfStorage", StDType::F16},
    {"BFloat16Storage", StDType::BF16}, {"LongStorage", StDType::I64}, {"IntStorage", StDType::I32},
    {"ShortStorage", StDType::I16}, {"CharStorage", StDType::I8}, {"ByteStorage", StDType::U8},
    {"BoolStorage", StDType::BOOL}};

std::string_view storage_class_name(StDType dtype) {
  for (const StorageClass& c : kStorageClasses)
    if (c.dtype == dtype) return c.name;
  return "?";
}

enum class Kind { None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Global, Storage, Tensor };

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Global: return "class or function";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
  }
  return "?";
}

// One value of the unpickler; containers refer to others by index into the
// arena, so values are freed flat (no recursion, cycles harmless).
struct Value {
  Kind kind = Kind::None;
  int64_t i = 0;                 // Int, Bool; Storage: numel; Tensor: storage offset
  double f = 0.0;                // Float
  std::string s;                 // Str, Bytes; Global: "module.name"; Storage: key
  std::vector<uint32_t> items;   // Tuple, List; Dict: key, value, key, value, ...
  Global global = Global::OrderedDict;
  StDType dtype = StDType::F32;  // Global Storage, Storage, Tensor
  uint32_t storage = 0;          // Tensor: its Storage value
  std::vector<int64_t> shape, stride;  // Tensor
};

std::string_view opcode_name(uint8_t op) {
  switch (op) {
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 0x8b: return "LONG4";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return "unknown";
  }
}

class Unpickler {
 public:
  Unpickler(std::string where, std::span<const uint8_t> pickle) : where_(std::move(where)), p_(pickle) {}

  // Runs data.pkl to its STOP; returns the index of the result.
  uint32_t run();
  const Value& at(uint32_t index) const { return values_[index]; }

 private:
  [[noreturn]] void damaged(std::string_view what) const {
    fail("{}: damaged pickle: {} at byte {}", where_, what, op_at_);
  }
  const uint8_t* take(uint64_t n) {
    if (n > p_.size() - pos_) damaged("the pickle ends inside an opcode's argument");
    const uint8_t* out = p_.data() + pos_;
    pos_ += n;
    return out;
  }
  template <typename T>
  T read() {
    T value;
    std::memcpy(&value, take(sizeof(T)), sizeof(T));
    return value;
  }
  uint32_t make(Value v) {
    if (values_.size() >= kMaxValues) fail("{}: the pickle builds more than {} values; a state dict needs far fewer", where_, kMaxValues);
    values_.push_back(std::move(v));
    return static_cast<uint32_t>(values_.size() - 1);
  }
  void push(uint32_t index) { stack_.push_back(index); }
  void push_new(Value v) { push(make(std::move(v))); }
  uint32_t pop() {
    if (stack_.size() <= floor()) damaged("the stack is empty");
    const uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  uint32_t top() const {
    if (stack_.size() <= floor()) damaged("the stack is empty");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // The values above the last mark, which is removed.
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) damaged("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> out(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }
  std::string read_line() {
    const auto begin = p_.begin() + static_cast<std::ptrdiff_t>(pos_);
    const auto nl = std::find(begin, p_.end(), uint8_t{'\n'});
    if (nl == p_.end()) damaged("a GLOBAL without its newline");
    std::string out(begin, nl);
    pos_ += out.size() + 1;
    return out;
  }
  void push_string(Kind kind, uint64_t n) {
    const uint8_t* s = take(n);
    Value v;
    v.kind = kind;
    v.s.assign(reinterpret_cast<const char*>(s), n);
    push_new(std::move(v));
  }
  void push_int(int64_t i) {
    Value v;
    v.kind = Kind::Int;
    v.i = i;
    push_new(std::move(v));
  }
  void memo_put(uint64_t key) { memo_[key] = top(); }
  void memo_get(uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) damaged(fmt::format("memo entry {} is read before it is written", key));
    push(it->second);
  }
  Value& container(Kind kind, std::string_view op) {
    Value& v = values_[top()];
    if (v.kind != kind) damaged(fmt::format("{} on a {}", op, kind_name(v.kind)));
    return v;
  }

  uint32_t global(const std::string& module, const std::string& name);
  uint32_t reduce(uint32_t callable, uint32_t args);
  uint32_t persistent_load(uint32_t pid);
  uint32_t rebuild_tensor(const std::vector<uint32_t>& args, std::string_view function);

  std::string where_;
  std::span<const uint8_t> p_;
  uint64_t pos_ = 0, op_at_ = 0;
  std::vector<Value> values_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
  std::map<std::string, uint32_t> storages_;  // key -> Storage value
};

// A name the pickle gives, for an error message: anything but printable ASCII
// as \xNN, so that a name holding a newline leaves the message one line.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7F ? std::string(1, c) : fmt::format("\\x{:02X}", u);
  }
  return out;
}

uint32_t Unpickler::global(const std::string& module, const std::string& name) {
  Value v;
  v.kind = Kind::Global;
  v.s = module + "." + name;
  if (module == "collections" && name == "OrderedDict") {
    v.global = Global::OrderedDict;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    v.global = Global::RebuildTensorV2;
  } else if (module == "torch._utils" && name == "_rebuild_tensor") {
    v.global = Global::RebuildTensor;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    v.global = Global::RebuildParameter;
  } else if (module == "torch._utils" && name == "_rebuild_parameter_with_state") {
    v.global = Global::RebuildParameterWithState;
  } else if (module == "torch" && name.ends_with("Storage")) {
    bool known = false;
    for (const StorageClass& c : kStorageClasses)
      if (c.name == name) {
        v.global = Global::Storage;
        v.dtype = c.dtype;
        known = true;
      }
    if (!known)
      fail("{}: storage class torch.{} holds a dtype anatomy does not read (it reads Float, Double, Half, BFloat16, "
           "Long, Int, Short, Char, Byte and Bool storages)",
           where_, printable(name));
  } else if (module == "torch.serialization" && name == "_get_layout") {
    fail("{}: the pickle names torch.serialization._get_layout: a sparse tensor, which anatomy does not read; save "
         "dense tensors",
         where_);
  } else {
    fail("{}: the pickle names the global '{}.{}', which a state dict of tensors does not use: refused (nothing in "
         "the file was run)",
         where_, printable(module), printable(name));
  }
  return make(std::move(v));
}

uint32_t Unpickler::persistent_load(uint32_t pid) {
  const Value& id = values_[pid];
  auto bad = [&](std::string_view why) -> uint32_t {
    fail("{}: a persistent id is not ('storage', class, key, location, numel): {}", where_, why);
  };
  if (id.kind != Kind::Tuple || id.items.size() != 5) return bad("not a tuple of five");
  const Value& tag = values_[id.items[0]];
  const Value& cls = values_[id.items[1]];
  const Value& key = values_[id.items[2]];
  const Value& location = values_[id.items[3]];
  const Value& numel = values_[id.items[4]];
  if (tag.kind != Kind::Str || tag.s != "storage") return bad("its first item is not 'storage'");
  if (cls.kind != Kind::Global || cls.global != Global::Storage) return bad("its class is not a storage class");
  if (key.kind != Kind::Str || key.s.empty()) return bad("its key is not a string");
  if (location.kind != Kind::Str) return bad("its location is not a string");
  if (numel.kind != Kind::Int || numel.i < 0) return bad("its size is not a non-negative integer");
  if (const auto it = storages_.find(key.s); it != storages_.end()) {
    const Value& seen = values_[it->second];
    if (seen.dtype != cls.dtype || seen.i != numel.i)
      fail("{}: storage '{}' appears as torch.{} of {} elements and as torch.{} of {}", where_, key.s,
           storage_class_name(seen.dtype), seen.i, storage_class_name(cls.dtype), numel.i);
    return it->second;
  }
  Value v;
  v.kind = Kind::Storage;
  v.dtype = cls.dtype;
  v.s = key.s;
  v.i = numel.i;
  const uint32_t index = make(std::move(v));
  storages_[values_[index].s] = index;
  return index;
}

uint32_t Unpickler::rebuild_tensor(const std::vector<uint32_t>& args, std::string_view function) {
  auto bad = [&](std::string_view why) -> uint32_t { fail("{}: torch._utils.{}: {}", where_, function, why); };
  const Value& storage = values_[args[0]];
  const Value& offset = values_[args[1]];
  const Value& size = values_[args[2]];
  const Value& stride = values_[args[3]];
  if (storage.kind != Kind::Storage) return bad("its first argument is not a storage");
  if (offset.kind != Kind::Int || offset.i < 0) return bad("its storage offset is not a non-negative integer");
  Value v;
  v.kind = Kind::Tensor;
  v.storage = args[0];
  v.dtype = storage.dtype;
  v.i = offset.i;
  for (const auto& [tuple, out, what] : {std::tuple{&size, &v.shape, "size"}, std::tuple{&stride, &v.stride, "stride"}}) {
    if (tuple->kind != Kind::Tuple) return bad(fmt::format("its {} is not a tuple", what));
    for (uint32_t item : tuple->items) {
      const Value& d = values_[item];
      if (d.kind != Kind::Int || d.i < 0) return bad(fmt::format("its {} holds something other than a non-negative integer", what));
      out->push_back(d.i);
    }
  }
  if (v.shape.size() != v.stride.size())
    return bad(fmt::format("size has {} dimensions, stride {}", v.shape.size(), v.stride.size()));
  return make(std::move(v));
}

uint32_t Unpickler::reduce(uint32_t callable, uint32_t args_index) {
  const Value& f = values_[callable];
  const Value& a = values_[args_index];
  if (f.kind != Kind::Global) damaged(fmt::format("REDUCE calls a {}", kind_name(f.kind)));
  if (a.kind != Kind::Tuple) damaged("REDUCE's arguments are not a tuple");
  const std::vector<uint32_t> args = a.items;
  auto arity = [&](size_t low, size_t high) {
    if (args.size() < low || args.size() > high)
      fail("{}: {} is called with {} arguments (expected {}{})", where_, f.s, args.size(), low,
           high > low ? fmt::format(" to {}", high) : "");
  };
  switch (f.global) {
    case Global::OrderedDict: {
      arity(0, 0);
      Value v;
      v.kind = Kind::Dict;
      return make(std::move(v));
    }
    case Global::RebuildTensorV2:
      arity(6, 7);  // (storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
      return rebuild_tensor(args, "_rebuild_tensor_v2");
    case Global::RebuildTensor:
      arity(4, 4);  // (storage, offset, size, stride)
      return rebuild_tensor(args, "_rebuild_tensor");
    case Global::RebuildParameter:
    case Global::RebuildParameterWithState:
      // (data, requires_grad, backward_hooks[, state]): the parameter's data is the tensor.
      if (f.global == Global::RebuildParameter) arity(3, 3);
      else arity(4, 4);
      if (values_[args[0]].kind != Kind::Tensor) fail("{}: {}'s data is not a tensor", where_, f.s);
      return args[0];
    case Global::Storage:
      fail("{}: the pickle calls {}, which a state dict never does: refused", where_, f.s);
  }
  damaged("REDUCE");
}

uint32_t Unpickler::run() {
  for (;;) {
    op_at_ = pos_;
    const uint8_t op = *take(1);
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t protocol = read<uint8_t>();
        if (protocol < 2 || protocol > 5) fail("{}: pickle protocol {} (torch.save writes 2 to 5)", where_, protocol);
        break;
      }
      case 0x95: {  // FRAME: a hint of the next frame's length
        const uint64_t n = read<uint64_t>();
        if (n > p_.size() - pos_) damaged("a FRAME longer than the rest of the pickle");
        break;
      }
      case '.': {  // STOP
        const uint32_t result = pop();
        if (!marks_.empty() || !stack_.empty()) damaged("values are left on the stack at STOP");
        return result;
      }
      case '(': marks_.push_back(stack_.size()); break;                     // MARK
      case '0': pop(); break;                                               // POP
      case '1': pop_mark(); break;                                          // POP_MARK
      case '2': push(top()); break;                                         // DUP
      case 'N': push_new({}); break;                                        // NONE
      case 0x88: case 0x89: {                                               // NEWTRUE, NEWFALSE
        Value v;
        v.kind = Kind::Bool;
        v.i = op == 0x88;
        push_new(std::move(v));
        break;
      }
      case 'J': push_int(read<int32_t>()); break;                           // BININT
      case 'K': push_int(read<uint8_t>()); break;                           // BININT1
      case 'M': push_int(read<uint16_t>()); break;                          // BININT2
      case 0x8a: {                                                          // LONG1
        const uint8_t n = read<uint8_t>();
        if (n > 8) fail("{}: an integer of {} bytes at byte {} of the pickle is too large", where_, n, op_at_);
        const uint8_t* b = take(n);
        uint64_t u = 0;
        for (int k = n - 1; k >= 0; --k) u = (u << 8) | b[k];
        if (n > 0 && n < 8 && (b[n - 1] & 0x80)) u |= ~uint64_t{0} << (8 * n);  // sign extension
        push_int(static_cast<int64_t>(u));
        break;
      }
      case 'G': {                                                           // BINFLOAT (big-endian)
        const uint64_t bits = __builtin_bswap64(read<uint64_t>());
        Value v;
        v.kind = Kind::Float;
        v.f = std::bit_cast<double>(bits);
        push_new(std::move(v));
        break;
      }
      case 'X': push_string(Kind::Str, read<uint32_t>()); break;           // BINUNICODE
      case 0x8c: push_string(Kind::Str, read<uint8_t>()); break;           // SHORT_BINUNICODE
      case 0x8d: push_string(Kind::Str, read<uint64_t>()); break;          // BINUNICODE8
      case 'B': push_string(Kind::Bytes, read<uint32_t>()); break;         // BINBYTES
      case 'C': push_string(Kind::Bytes, read<uint8_t>()); break;          // SHORT_BINBYTES
      case 0x8e: push_string(Kind::Bytes, read<uint64_t>()); break;        // BINBYTES8
      case ')': case ']': case '}': {                                      // EMPTY_TUPLE, EMPTY_LIST, EMPTY_DICT
        Value v;
        v.kind = op == ')' ? Kind::Tuple : op == ']' ? Kind::List : Kind::Dict;
        push_new(std::move(v));
        break;
      }
      case 't': case 'l': case 'd': {                                      // TUPLE, LIST, DICT (from the mark)
        Value v;
        v.kind = op == 't' ? Kind::Tuple : op == 'l' ? Kind::List : Kind::Dict;
        v.items = pop_mark();
        if (v.kind == Kind::Dict && v.items.size() % 2 != 0) damaged("DICT of an odd number of items");
        push_new(std::move(v));
        break;
      }
      case 0x85: case 0x86: case 0x87: {                                   // TUPLE1, TUPLE2, TUPLE3
        Value v;
        v.kind = Kind::Tuple;
        v.items.resize(op - 0x84);
        for (size_t k = v.items.size(); k-- > 0;) v.items[k] = pop();
        push_new(std::move(v));
        break;
      }
      case 'a': {                                                          // APPEND
        const uint32_t item = pop();
        container(Kind::List, "APPEND").items.push_back(item);
        break;
      }
      case 'e': {                                                          // APPENDS
        const std::vector<uint32_t> items = pop_mark();
        Value& list = container(Kind::List, "APPENDS");
        list.items.insert(list.items.end(), items.begin(), items.end());
        break;
      }
      case 's': {                                                          // SETITEM
        const uint32_t value = pop(), key = pop();
        Value& dict = container(Kind::Dict, "SETITEM");
        dict.items.push_back(key);
        dict.items.push_back(value);
        break;
      }
      case 'u': {                                                          // SETITEMS
        const std::vector<uint32_t> items = pop_mark();
        if (items.size() % 2 != 0) damaged("SETITEMS of an odd number of items");
        Value& dict = container(Kind::Dict, "SETITEMS");
        dict.items.insert(dict.items.end(), items.begin(), items.end());
        break;
      }
      case 'c': {                                                          // GLOBAL
        const std::string module = read_line();
        const std::string name = read_line();
        push(global(module, name));
        break;
      }
      case 0x93: {                                                         // STACK_GLOBAL
        const uint32_t name = pop(), module = pop();
        if (values_[name].kind != Kind::Str || values_[module].kind != Kind::Str) damaged("STACK_GLOBAL of non-strings");
        const std::string n = values_[name].s, m = values_[module].s;
        push(global(m, n));
        break;
      }
      case 'R': {                                                          // REDUCE
        const uint32_t args = pop(), callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 'b': {                                                          // BUILD
        const uint32_t state = pop();
        (void)state;
        // An OrderedDict's state is its instance attributes (a state dict's
        // _metadata): not tensors, so not needed. Nothing else is built.
        const Value& target = values_[top()];
        if (target.kind != Kind::Dict) fail("{}: the pickle sets the state of a {}: refused", where_, kind_name(target.kind));
        break;
      }
      case 'Q': {                                                          // BINPERSID
        const uint32_t pid = pop();
        push(persistent_load(pid));
        break;
      }
      case 'h': memo_get(read<uint8_t>()); break;                          // BINGET
      case 'j': memo_get(read<uint32_t>()); break;                         // LONG_BINGET
      case 'q': memo_put(read<uint8_t>()); break;                          // BINPUT
      case 'r': memo_put(read<uint32_t>()); break;                         // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;                            // MEMOIZE
      default:
        fail("{}: pickle opcode {} (0x{:02x}) at byte {} is not one a state dict uses: refused", where_,
             opcode_name(op), op, op_at_);
    }
  }
}

// Dense strides of `shape` are its strides, ignoring dimensions of size 1 (as
// torch's is_contiguous does); any strides when the tensor is empty.
bool contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride) {
  int64_t expected = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 0) return true;
    if (shape[k] != 1 && stride[k] != expected) return false;
    expected *= shape[k];  // no overflow: the shape's element count was checked first
  }
  return true;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

SafetensorsFile open_torch_checkpoint(const std::string& path) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(read_file_bytes(path));
  const std::span<const uint8_t> all(*bytes);
  if (!looks_like_zip(all)) {
    // Legacy torch.save: a pickle (protocol 2) of the magic number, then more pickles and raw storages.
    if (!all.empty() && all[0] == 0x80)
      fail("{}: legacy torch.save format: re-save with torch.save(..., _use_new_zipfile_serialization=True) or "
           "convert to safetensors",
           path);
    if (all.size() > 262 && std::memcmp(all.data() + 257, "ustar", 5) == 0)
      fail("{}: legacy torch.save format (a tar archive): re-save with torch.save(..., "
           "_use_new_zipfile_serialization=True) or convert to safetensors",
           path);
    fail("{}: not a zip archive, the format torch.save writes (PyTorch 1.6 and later)", path);
  }
  const ZipArchive zip = ZipArchive::parse(path, bytes);
  if (zip.entries().empty()) fail("{}: the zip archive is empty", path);
  // As torch's reader: every entry is in the folder of the first one.
  const std::string& first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0)
    fail("{}: entry '{}' is not in a folder, as torch.save's entries are", path, first);
  const std::string prefix = first.substr(0, slash + 1);

  if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
    const std::span<const uint8_t> text = zip.stored(*order);
    const std::string_view value(reinterpret_cast<const char*>(text.data()), text.size());
    if (value != "little") {
      // The entry's bytes, shown on one line: anything but printable ASCII as \xNN, and cut.
      std::string shown;
      for (const char c : value.substr(0, 40)) {
        const auto u = static_cast<unsigned char>(c);
        shown += u >= 0x20 && u < 0x7F ? std::string(1, c) : fmt::format("\\x{:02X}", u);
      }
      if (value.size() > 40) shown += "...";
      fail("{}: the tensors are stored {} (entry '{}'); anatomy reads little-endian files: {}", path,
           value == "big" ? "big-endian" : fmt::format("in byte order '{}'", shown), order->name, kConvertHint);
    }
  }
  const ZipEntry* pickle_entry = zip.find(prefix + "data.pkl");
  if (!pickle_entry) fail("{}: no entry '{}data.pkl': not a file of torch.save", path, prefix);
  const std::string pickle_where = path + ": " + pickle_entry->name;
  Unpickler unpickler(pickle_where, zip.stored(*pickle_entry));
  const uint32_t root_index = unpickler.run();
  const Value& root = unpickler.at(root_index);
  if (root.kind != Kind::Dict)
    fail("{}: holds a pickled {}, not a state dict (a dict of tensors)", path, kind_name(root.kind));

  std::vector<StTensorInfo> tensors;
  std::set<std::string> names;
  std::map<std::string, std::pair<uint64_t, uint64_t>> storage_bytes;  // key -> [begin, end) in the file
  for (size_t k = 0; k + 1 < root.items.size(); k += 2) {
    const Value& key = unpickler.at(root.items[k]);
    const Value& value = unpickler.at(root.items[k + 1]);
    if (key.kind != Kind::Str) fail("{}: the state dict has a key that is a {}, not a string", path, kind_name(key.kind));
    const std::string& name = key.s;
    if (!names.insert(name).second) fail("{}: tensor '{}' appears twice in the state dict", path, name);
    if (value.kind != Kind::Tensor)
      fail("{}: entry '{}' of the state dict is a {}, not a tensor (a training checkpoint? save model.state_dict())",
           path, name, kind_name(value.kind));
    const Value& storage = unpickler.at(value.storage);
    const uint64_t element = st_dtype_size(value.dtype);

    uint64_t numel = 1;
    for (int64_t d : value.shape)
      if (!checked_mul(numel, static_cast<uint64_t>(d), &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("{}: tensor '{}': shape {} is too large", path, name, shape_string(value.shape));
    uint64_t nbytes = 0;
    if (!checked_mul(numel, element, &nbytes))
      fail("{}: tensor '{}': shape {} is too large", path, name, shape_string(value.shape));
    if (!contiguous(value.shape, value.stride))
      fail("{}: tensor '{}' is not contiguous (shape {}, stride {}): save it with .contiguous() (or "
           "convert the file to safetensors)",
           path, name, shape_string(value.shape), shape_string(value.stride));

    auto it = storage_bytes.find(storage.s);
    if (it == storage_bytes.end()) {
      const std::string entry_name = prefix + "data/" + storage.s;
      const ZipEntry* entry = zip.find(entry_name);
      if (!entry) fail("{}: tensor '{}': its storage '{}' is not in the archive", path, name, entry_name);
      uint64_t storage_size = 0;
      if (!checked_mul(static_cast<uint64_t>(storage.i), element, &storage_size) || storage_size != entry->size)
        fail("{}: tensor '{}': entry '{}' holds {} bytes, but torch.{} of {} elements needs {}", path, name,
             entry_name, entry->size, storage_class_name(storage.dtype), storage.i,
             checked_mul(static_cast<uint64_t>(storage.i), element, &storage_size) ? fmt::format("{}", storage_size)
                                                                                    : std::string("more than fits"));
      const std::span<const uint8_t> data = zip.stored(*entry);  // checks bounds and the CRC
      const uint64_t begin = static_cast<uint64_t>(data.data() - bytes->data());
      it = storage_bytes.emplace(storage.s, std::pair{begin, begin + data.size()}).first;
    }
    const auto [storage_begin, storage_end] = it->second;
    const uint64_t offset = static_cast<uint64_t>(value.i);
    uint64_t offset_bytes = 0;
    if (nbytes > 0 && (!checked_mul(offset, element, &offset_bytes) || offset_bytes > storage_end - storage_begin ||
                       nbytes > storage_end - storage_begin - offset_bytes))
      fail("{}: tensor '{}': {} elements at offset {} go beyond its storage '{}' of {} elements", path, name, numel,
           offset, storage.s, storage.i);
    StTensorInfo info;
    info.name = name;
    info.dtype = value.dtype;
    info.shape = value.shape;
    info.begin = storage_begin + offset_bytes;
    info.end = info.begin + nbytes;
    tensors.push_back(std::move(info));
  }
  return SafetensorsFile::view(path, bytes, std::move(tensors));
}

}  // namespace anatomy::io
