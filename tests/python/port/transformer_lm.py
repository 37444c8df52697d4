"""A word-level Transformer language model on a synthetic corpus, written the way PyTorch's
word_language_model example and its "Language Modeling with nn.Transformer" tutorial write it: a Dictionary
and Corpus that tokenize text files, batchify / get_batch over a (seq_len, batch) layout, sinusoidal
PositionalEncoding registered as a buffer, nn.TransformerEncoder of nn.TransformerEncoderLayer with
nn.Transformer.generate_square_subsequent_mask, nn.CrossEntropyLoss, SGD with StepLR, clip_grad_norm_,
evaluation under torch.no_grad with perplexity, and sampling with torch.multinomial at the end.
Dropout is 0 so that the losses do not depend on a random stream.

    python3 transformer_lm.py --steps 20 [--save-init init.pt | --init-from init.pt] [--out ckpt.pt]
"""
import argparse
import math
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer


class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus(object):
    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, 'train.txt'))
        self.valid = self.tokenize(os.path.join(path, 'valid.txt'))

    def tokenize(self, path):
        """Tokenizes a text file."""
        assert os.path.exists(path)
        # Add words to the dictionary
        with open(path, 'r', encoding="utf8") as f:
            for line in f:
                words = line.split() + ['<eos>']
                for word in words:
                    self.dictionary.add_word(word)

        # Tokenize file content
        with open(path, 'r', encoding="utf8") as f:
            idss = []
            for line in f:
                words = line.split() + ['<eos>']
                ids = []
                for word in words:
                    ids.append(self.dictionary.word2idx[word])
                idss.append(torch.tensor(ids).type(torch.int64))
            ids = torch.cat(idss)
        return ids


def write_synthetic_corpus(path, seed=0):
    """Sentences from a tiny grammar (subject verb object [adverb]), so that there is something to learn."""
    rng = np.random.default_rng(seed)
    subjects = ['the cat', 'a dog', 'my friend', 'the teacher', 'our neighbour', 'a child', 'the bird']
    verbs = ['sees', 'likes', 'follows', 'calls', 'finds', 'helps', 'watches', 'remembers']
    objects = ['the ball', 'a tree', 'the river', 'an apple', 'the house', 'a song', 'the road', 'my book']
    adverbs = ['today', 'again', 'quietly', 'at night', 'every morning']

    def sentence():
        words = [subjects[rng.integers(len(subjects))], verbs[rng.integers(len(verbs))],
                 objects[rng.integers(len(objects))]]
        if rng.random() < 0.5:
            words.append(adverbs[rng.integers(len(adverbs))])
        return ' '.join(words) + ' .'

    for name, lines in (('train.txt', 2000), ('valid.txt', 200)):
        with open(os.path.join(path, name), 'w', encoding='utf8') as f:
            for _ in range(lines):
                f.write(sentence() + '\n')


class PositionalEncoding(nn.Module):
    r"""Inject some information about the relative or absolute position of the tokens in the sequence.
        PE(pos, 2i) = sin(pos/10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos/10000^(2i/d_model))
    """

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Module):
    """Container module with an encoder, a transformer encoder and a decoder."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super(TransformerModel, self).__init__()
        self.model_type = 'Transformer'
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None

        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, self.src_mask)
        output = self.decoder(output)
        return torch.log_softmax(output, dim=-1)


def batchify(data, bsz, device):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def main():
    parser = argparse.ArgumentParser(description='PyTorch Transformer Language Model on a synthetic corpus')
    parser.add_argument('--steps', type=int, default=20, help='number of training batches')
    parser.add_argument('--emsize', type=int, default=64, help='size of word embeddings')
    parser.add_argument('--nhid', type=int, default=128, help='number of hidden units per layer')
    parser.add_argument('--nlayers', type=int, default=2, help='number of layers')
    parser.add_argument('--nhead', type=int, default=4, help='the number of heads in the encoder')
    parser.add_argument('--lr', type=float, default=2.0, help='initial learning rate')
    parser.add_argument('--clip', type=float, default=0.25, help='gradient clipping')
    parser.add_argument('--batch_size', type=int, default=16, metavar='N', help='batch size')
    parser.add_argument('--bptt', type=int, default=32, help='sequence length')
    parser.add_argument('--dropout', type=float, default=0.0, help='dropout applied to layers (0 = no dropout)')
    parser.add_argument('--seed', type=int, default=1111, help='random seed')
    parser.add_argument('--log-interval', type=int, default=5, metavar='N', help='report interval')
    parser.add_argument('--save-init', default=None, help='write the initial weights here (torch.save)')
    parser.add_argument('--init-from', default=None, help='start from these weights (torch.load)')
    parser.add_argument('--out', default=None, help='path to save the final model')
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    with tempfile.TemporaryDirectory() as data_dir:
        write_synthetic_corpus(data_dir)
        corpus = Corpus(data_dir)
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, 10, device)
    ntokens = len(corpus.dictionary)
    print(f"vocabulary {ntokens}, train tokens {corpus.train.numel()}, train batches {train_data.shape}")

    model = TransformerModel(ntokens, args.emsize, args.nhead, args.nhid, args.nlayers, args.dropout).to(device)
    if args.init_from:
        model.load_state_dict(torch.load(args.init_from, map_location=device))
    if args.save_init:
        torch.save(model.state_dict(), args.save_init)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10, gamma=0.5)

    def evaluate(data_source):
        model.eval()
        total_loss = 0.
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args.bptt)
                output = model(data)
                output = output.view(-1, ntokens)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    model.train()
    total_loss = 0.
    tokens = 0
    start_time = time.time()
    t0 = time.perf_counter()
    positions = range(0, train_data.size(0) - 1, args.bptt)
    for step in range(args.steps):
        i = positions[step % len(positions)]
        data, targets = get_batch(train_data, i, args.bptt)
        model.zero_grad()
        output = model(data)
        output = output.view(-1, ntokens)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        scheduler.step()

        total_loss += loss.item()
        tokens += data.numel()
        print(f"step {step}: loss {loss.item():.8e}")
        if (step + 1) % args.log_interval == 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print('| step {:3d} | lr {:02.3f} | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}'.format(
                step + 1, scheduler.get_last_lr()[0], elapsed * 1000 / args.log_interval, cur_loss,
                math.exp(cur_loss)))
            total_loss = 0
            start_time = time.time()
    elapsed = time.perf_counter() - t0
    print(f"tokens/s {tokens / elapsed:.1f}")

    val_loss = evaluate(val_data)
    print('| end of training | valid loss {:5.2f} | valid ppl {:8.2f}'.format(val_loss, math.exp(val_loss)))
    if args.out:
        with open(args.out, 'wb') as f:
            torch.save(model.state_dict(), f)

    # generate: feed the growing sequence back, sample the next word with multinomial
    model.eval()
    input = torch.tensor([[corpus.dictionary.word2idx['the']]], dtype=torch.long, device=device)
    words = []
    with torch.no_grad():
        for _ in range(12):
            output = model(input, has_mask=True)
            word_weights = output[-1].squeeze().div(0.8).exp().cpu()
            word_idx = torch.multinomial(word_weights, 1)[0]
            input = torch.cat([input, word_idx.view(1, 1).to(device)], 0)
            words.append(corpus.dictionary.idx2word[word_idx])
    print("sample:", ' '.join(words))


if __name__ == '__main__':
    main()
