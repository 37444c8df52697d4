"""Recurrent layers (nn.RNN, nn.LSTM, nn.GRU and their cells) with torch's parameter names and layout
(weight_ih_l{k}[_reverse], weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, weight_hr_l{k} for LSTM projections), gate
order (LSTM: input, forget, cell, output; GRU: reset, update, new), arguments, checks and initialisation.

Composed of dygrad's ops, one time step after another: each layer projects the whole input sequence by W_ih at
once ([T, N, G] from one matmul), then each step adds W_hh h and applies the gates. Shapes: T time, N batch,
H hidden, P projection (H without one), D directions; output [T, N, D * P] (batch_first: [N, T, D * P]),
h_n [layers * D, N, P], c_n [layers * D, N, H]."""
import math
import numbers
import warnings

from .. import _C
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


# --- one step of each cell: x_gates = W_ih x + b_ih (already projected), h [N, P], c [N, H] -------------------------
def _lstm_step(x_gates, h, c, w_hh, b_hh, w_hr):
    gates = x_gates + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, 1)
    c = _C.sigmoid(f) * c + _C.sigmoid(i) * _C.tanh(g)
    h = _C.sigmoid(o) * _C.tanh(c)
    return (h if w_hr is None else F.linear(h, w_hr)), c


def _gru_step(x_gates, h, w_hh, b_hh):
    x_r, x_z, x_n = x_gates.chunk(3, 1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, 1)
    reset, update = _C.sigmoid(x_r + h_r), _C.sigmoid(x_z + h_z)
    new = _C.tanh(x_n + reset * h_n)
    return new + update * (h - new)  # torch's form of (1 - z) n + z h


def _rnn_step(x_gates, h, w_hh, b_hh, relu):
    pre = x_gates + F.linear(h, w_hh, b_hh)
    return _C.relu(pre) if relu else _C.tanh(pre)


class RNNBase(Module):
    """torch.nn.RNNBase: the parameters of every layer and direction, and the layer loop."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=2)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: {type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: {type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        directions = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names, self._all_weights = [], []
        for layer in range(num_layers):
            for direction in range(directions):
                layer_input = input_size if layer == 0 else real_hidden * directions
                suffix = "_reverse" if direction == 1 else ""
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes += [("weight_hr", (proj_size, hidden_size))]
                names = []
                for base, shape in shapes:
                    name = f"{base}_l{layer}{suffix}"
                    setattr(self, name, Parameter(_C.empty(shape, device=device, dtype=dtype)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _flat_weights(self):
        return [getattr(self, name, None) for name in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self):
        """A no-op, as torch's on the CPU (it packs weights for cuDNN)."""

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # --- checks, as torch's (messages included) ---
    def check_input(self, input):
        weight = self._flat_weights[0]
        if input.dtype != weight.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). Convert "
                             f"input: input.to({weight.dtype}), or convert model: model.to({input.dtype})")
        if input.dim() != 3:
            raise RuntimeError(f"input must have 3 dimensions, got {input.dim()}")
        if self.input_size != input.shape[-1]:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{input.shape[-1]}")

    def get_expected_hidden_size(self, input):
        batch = input.shape[0] if self.batch_first else input.shape[1]
        directions = 2 if self.bidirectional else 1
        return (self.num_layers * directions, batch, self.proj_size if self.proj_size > 0 else self.hidden_size)

    def check_hidden_size(self, hx, expected, msg="Expected hidden size {}, got {}"):
        if tuple(hx.shape) != expected:
            raise RuntimeError(msg.format(expected, list(hx.shape)))

    def _prepare(self, input, hx, cell_state):
        """Checks as torch's forward does; returns (batched, input, hidden states or None)."""
        if not isinstance(input, _C.Tensor):
            raise NotImplementedError(f"{type(self).__name__}: PackedSequence inputs are not supported by dygrad")
        name = "RNN" if self.mode.startswith("RNN") else self.mode
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D instead")
        batched = input.dim() == 3
        if not batched:
            input = input.unsqueeze(0 if self.batch_first else 1)
        if hx is not None:
            states = hx if cell_state else (hx,)
            want = 3 if batched else 2
            if any(s.dim() != want for s in states):
                dims = ", ".join(f"{s.dim()}-D" for s in states)
                if cell_state:
                    raise RuntimeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, hx and cx should "
                                       f"also be {want}-D but got ({dims}) tensors")
                raise RuntimeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, hx should also be "
                                   f"{want}-D but got {dims} tensor")
            if not batched:
                states = tuple(s.unsqueeze(1) for s in states)
            hx = states
        self.check_input(input)
        expected = self.get_expected_hidden_size(input)
        if hx is not None:
            if cell_state:
                self.check_hidden_size(hx[0], expected, "Expected hidden[0] size {}, got {}")
                self.check_hidden_size(hx[1], expected[:2] + (self.hidden_size,), "Expected hidden[1] size {}, got {}")
            else:
                self.check_hidden_size(hx[0], expected)
        return batched, input, hx

    def _run(self, input, hx):
        """input [T, N, F] (after the batch_first transpose); hx: a tuple of [L * D, N, *] states or None."""
        steps, batch = input.shape[0], input.shape[1]
        directions = 2 if self.bidirectional else 1
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        lstm = self.mode == "LSTM"
        if hx is None:
            zeros = _C.zeros((self.num_layers * directions, batch, real_hidden), dtype=input.dtype, device=input.device)
            hx = (zeros, _C.zeros((self.num_layers * directions, batch, self.hidden_size), dtype=input.dtype,
                                  device=input.device)) \
                if lstm else (zeros,)
        final_h, final_c = [], []
        layer_input = input
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                names = self._all_weights[layer * directions + direction]
                weights = dict(zip((n.split("_l")[0] for n in names), (getattr(self, n) for n in names)))
                index = layer * directions + direction
                x_gates = F.linear(layer_input, weights["weight_ih"], weights.get("bias_ih"))  # [T, N, G]
                h = hx[0][index]
                c = hx[1][index] if lstm else None
                order = range(steps - 1, -1, -1) if direction == 1 else range(steps)
                sequence = [None] * steps
                for t in order:
                    if lstm:
                        h, c = _lstm_step(x_gates[t], h, c, weights["weight_hh"], weights.get("bias_hh"),
                                          weights.get("weight_hr"))
                    elif self.mode == "GRU":
                        h = _gru_step(x_gates[t], h, weights["weight_hh"], weights.get("bias_hh"))
                    else:
                        h = _rnn_step(x_gates[t], h, weights["weight_hh"], weights.get("bias_hh"),
                                      self.mode == "RNN_RELU")
                    sequence[t] = h
                outputs.append(_C.stack(sequence, 0) if steps else
                               _C.zeros((0, batch, real_hidden), dtype=input.dtype, device=input.device))
                final_h.append(h)
                if lstm:
                    final_c.append(c)
            layer_input = outputs[0] if directions == 1 else _C.cat(outputs, 2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        h_n = _C.stack(final_h, 0)
        return layer_input, ((h_n, _C.stack(final_c, 0)) if lstm else h_n)

    def _forward(self, input, hx):
        cell_state = self.mode == "LSTM"
        batched, input, hx = self._prepare(input, hx, cell_state)
        sequence = input.transpose(0, 1) if self.batch_first else input
        output, hidden = self._run(sequence, hx)
        if self.batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output = output.squeeze(0 if self.batch_first else 1)
            hidden = tuple(s.squeeze(1) for s in hidden) if cell_state else hidden.squeeze(1)
        return output, hidden

    def forward(self, input, hx=None):
        return self._forward(input, hx)


class RNN(RNNBase):
    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)

    def __setattr__(self, name, value):  # nonlinearity is set before Module.__init__, as torch does
        if "_parameters" not in self.__dict__ and name == "nonlinearity":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


class LSTM(RNNBase):
    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


# --- cells ------------------------------------------------------------------------------------------------------
class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(_C.empty((num_chunks * hidden_size, input_size), device=device, dtype=dtype))
        self.weight_hh = Parameter(_C.empty((num_chunks * hidden_size, hidden_size), device=device, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(_C.empty((num_chunks * hidden_size,), device=device, dtype=dtype))
            self.bias_hh = Parameter(_C.empty((num_chunks * hidden_size,), device=device, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _prepare(self, name, input, states):
        """torch's checks of a cell's input and hidden states (None for zeros); returns batched, input, states."""
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for s in states:
            if s is not None and s.dim() not in (1, 2):
                raise ValueError(f"{name}: Expected hidden to be 1D or 2D, got {s.dim()}D instead")
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} expected {self.input_size}")
        prepared = []
        for i, s in enumerate(states):
            if s is None:
                s = _C.zeros((input.shape[0], self.hidden_size), dtype=input.dtype, device=input.device)
            elif not batched:
                s = s.unsqueeze(0)
            if input.shape[0] != s.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{i} batch size {s.shape[0]}")
            if s.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got {s.shape[1]}, expected "
                                   f"{self.hidden_size}")
            prepared.append(s)
        return batched, input, prepared


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        batched, input, (h,) = self._prepare("RNNCell", input, (hx,))
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        out = _rnn_step(F.linear(input, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                        self.nonlinearity == "relu")
        return out if batched else out.squeeze(0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        batched, input, (h, c) = self._prepare("LSTMCell", input, (None, None) if hx is None else tuple(hx))
        h, c = _lstm_step(F.linear(input, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh, None)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        batched, input, (h,) = self._prepare("GRUCell", input, (hx,))
        out = _gru_step(F.linear(input, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return out if batched else out.squeeze(0)
