# A check of DeviceRing's event orderings without a GPU: `python3 tests/train/replicas/device_ring_sim.py`
# (not part of `make test`). It queues exactly what DeviceRing::run queues (train/replicas/device_ring.cpp:
# entered, phases A/B/C per step, the final wait; same-device and staged links), two training
# steps of two buckets with compute streams that overwrite the buffers after waiting, then runs
# the streams in thousands of random interleavings (each stream in order, a wait captures the
# event's latest record at enqueue time, as cudaStreamWaitEvent does). Values are symbolic sum
# expressions, so any race or wrong order shows as a result different from the CPU Ring's.
# Dropping the final wait or the `taken` wait makes it fail; the all-gather's wait on the right
# neighbour is implied by the chain of left waits (dropping it still passes). trial_trainer
# replays what Engine::launch queues for GPU replicas over three steps (buckets queued as
# the last replica completes them, the overflow flags OR-ed by the same ring, the gradients
# zeroed after the decision); dropping either of its compute-stream waits makes it fail.
import random, sys

def chunk(n,R,c): return (n*c//R, n*(c+1)//R)
def send(R,r,t): return (r-t)%R
def recv(R,r,t): return send(R,r-1,t)

class Sim:
    def __init__(s, R, staged):
        s.R=R; s.staged=staged
        s.streams={}  # name -> list of ops
        s.ev_count={}  # event name -> number of records enqueued
        s.ev_done={}   # event name -> records executed
        s.mem={}
    def q(s, st, op): s.streams.setdefault(st,[]).append(op)
    def record(s, st, ev):
        s.ev_count[ev]=s.ev_count.get(ev,0)+1; k=s.ev_count[ev]
        s.q(st, ('rec',ev,k))
    def wait(s, st, ev):
        k=s.ev_count.get(ev,0)
        if k: s.q(st, ('wait',ev,k))
    def run(s, rng):
        pos={k:0 for k in s.streams}
        while True:
            ready=[]
            for k,ops in s.streams.items():
                if pos[k]<len(ops):
                    op=ops[pos[k]]
                    if op[0]=='wait' and s.ev_done.get(op[1],0)<op[2]: continue
                    ready.append(k)
            if not ready:
                assert all(pos[k]==len(v) for k,v in s.streams.items()), "deadlock"
                return
            k=rng.choice(ready); op=s.streams[k][pos[k]]; pos[k]+=1
            if op[0]=='rec': s.ev_done[op[1]]=max(s.ev_done.get(op[1],0),op[2])
            elif op[0]=='fn': op[1]()

    def allreduce(s, bufs, n, ready, tag):
        R=s.R; mem=s.mem
        comm=lambda r: 'comm%d'%(r%R)
        for r in range(R):
            if ready: s.wait(comm(r), ready[r])
            s.record(comm(r),'entered%d'%r)
        steps=2*(R-1)
        for t in range(steps):
            for r in range(R):
                if not s.staged: continue
                b,e=chunk(n,R,send(R,r,t))
                s.wait(comm(r),'taken%d'%((r+1)%R))
                def d2h(r=r,b=b,e=e):
                    mem['stage%d'%r]=[mem[bufs[r]][i] for i in range(b,e)]
                s.q(comm(r),('fn',d2h))
                s.record(comm(r),'staged%d'%r)
            for r in range(R):
                L=(r-1)%R
                b,e=chunk(n,R,recv(R,r,t))
                gather=t>=R-1
                if s.staged: s.wait(comm(r),'staged%d'%L)
                else: s.wait(comm(r), 'entered%d'%L if t==0 else 'done%d_%d'%(L,t-1))
                if gather: s.wait(comm(r),'done%d_%d'%((r+1)%R,t-(R-1)))
                def cp(r=r,L=L,b=b,e=e,gather=gather):
                    src=mem['stage%d'%L] if s.staged else [mem[bufs[L]][i] for i in range(b,e)]
                    assert len(src)==e-b
                    if gather:
                        for j,i in enumerate(range(b,e)): mem[bufs[r]][i]=src[j]
                    else: mem['recv%d'%r]=list(src)
                s.q(comm(r),('fn',cp))
                if s.staged: s.record(comm(r),'taken%d'%r)
            for r in range(R):
                if t<R-1:
                    b,e=chunk(n,R,recv(R,r,t))
                    last=(t==R-2)
                    def red(r=r,b=b,e=e,last=last):
                        src=mem['recv%d'%r]
                        for j,i in enumerate(range(b,e)):
                            v='(%s+%s)'%(mem[bufs[r]][i],src[j])
                            mem[bufs[r]][i]=v+'/R' if last else v
                    s.q(comm(r),('fn',red))
                s.record(comm(r),'done%d_%d'%(r,t))
        for r in range(R):
            if R>1: s.wait(comm(r),'done%d_%d'%((r+1)%R,steps-1))
            s.record(comm(r),'finished%d'%r)

def cpu_ring(vals):  # vals: list per replica of symbols; the CPU Ring's expression per element
    R=len(vals); n=len(vals[0]); buf=[list(v) for v in vals]
    for t in range(R-1):
        new=[list(b) for b in buf]
        for r in range(R):
            L=(r-1)%R; b,e=chunk(n,R,recv(R,r,t))
            for i in range(b,e):
                v='(%s+%s)'%(buf[r][i],buf[L][i]); new[r][i]=v+'/R' if t==R-2 else v
        buf=new
    for t in range(R-1,2*(R-1)):
        new=[list(b) for b in buf]
        for r in range(R):
            L=(r-1)%R; b,e=chunk(n,R,recv(R,r,t))
            for i in range(b,e): new[r][i]=buf[L][i]
        buf=new
    return buf

def trial(R, staged, seed):
    rng=random.Random(seed)
    s=Sim(R,staged); mem=s.mem
    nA, nB = rng.choice([1,R-1,R+1,7,13]), rng.choice([1,2,R+1,5])
    # two training steps: bucket A and B ready, all-reduced; then compute writes A, B again
    for step in range(2):
        for name,n in (('A',nA),('B',nB)):
            for r in range(R):
                buf='%s%d'%(name,r)
                def write(buf=buf,r=r,n=n,name=name,step=step):
                    mem[buf]=['%s%d.%d.%d'%(name,step,r,i) for i in range(n)]
                s.q('compute%d'%r,('fn',write))
                s.record('compute%d'%r,'ready%s%d'%(name,r))
            s.allreduce(['%s%d'%(name,r) for r in range(R)], n, ['ready%s%d'%(name,r) for r in range(R)], name)
        for r in range(R):
            s.wait('compute%d'%r,'finished%d'%r)
            def snap(r=r,step=step):
                mem['resA%d.%d'%(step,r)]=list(mem['A%d'%r]); mem['resB%d.%d'%(step,r)]=list(mem['B%d'%r])
            s.q('compute%d'%r,('fn',snap))
    s.run(rng)
    for step in range(2):
        for name,n in (('A',nA),('B',nB)):
            want=cpu_ring([['%s%d.%d.%d'%(name,step,r,i) for i in range(n)] for r in range(R)])
            for r in range(R):
                got=mem['res%s%d.%d'%(name,step,r)]
                assert got==want[r], (R,staged,seed,name,step,r,got,want[r])

def trial_trainer(R, staged, seed):
    # What Engine::launch queues (train/engine/engine.cpp), three steps of it, in its host
    # order: replica after replica, backward writes buckets A, B, C (recording bucket-ready
    # events); a bucket's all-reduce is queued when the last replica marks it; every compute
    # stream waits for the ring; the overflow checks write the flags and record `checked`; the
    # flags are OR-ed by the same ring (the sum expressions stand for the OR); each compute
    # stream waits again, decides (reads the flags), updates, zeroes the gradients.
    rng=random.Random(seed)
    s=Sim(R,staged); mem=s.mem
    sizes={'A':rng.choice([1,R+1,7]), 'B':rng.choice([2,5,R-1 or 1]), 'C':rng.choice([1,3,13])}
    P=rng.choice([1,R+1,9])  # flags: one per parameter
    order=['A','B','C']
    for step in range(3):
        marked={k:0 for k in order}; queued=0
        for r in range(R):
            for name in order:
                buf='%s%d'%(name,r); n=sizes[name]
                def write(buf=buf,r=r,n=n,name=name,step=step):
                    mem[buf]=['%s%d.%d.%d'%(name,step,r,i) for i in range(n)]
                s.q('compute%d'%r,('fn',write))
                s.record('compute%d'%r,'ready%s%d'%(name,r))
                marked[name]+=1
                while queued<len(order) and marked[order[queued]]==R:
                    b=order[queued]; queued+=1
                    s.allreduce(['%s%d'%(b,q) for q in range(R)], sizes[b],
                                ['ready%s%d'%(b,q) for q in range(R)], b)
        for r in range(R):
            s.wait('compute%d'%r,'finished%d'%r)
        for r in range(R):
            def check(r=r,step=step):  # reads the averaged gradients, writes the flags
                for name in order: mem['res%s%d.%d'%(name,step,r)]=list(mem['%s%d'%(name,r)])
                mem['F%d'%r]=['F%d.%d.%d'%(step,r,i) for i in range(P)]
            s.q('compute%d'%r,('fn',check))
            s.record('compute%d'%r,'checked%d'%r)
        s.allreduce(['F%d'%r for r in range(R)], P, ['checked%d'%r for r in range(R)], 'F')
        for r in range(R):
            s.wait('compute%d'%r,'finished%d'%r)
            def decide(r=r,step=step):  # reads the OR-ed flags; then zeroes the gradients
                mem['resF%d.%d'%(step,r)]=list(mem['F%d'%r])
                for name in order: mem['%s%d'%(name,r)]=['0']*sizes[name]
            s.q('compute%d'%r,('fn',decide))
    s.run(rng)
    for step in range(3):
        for name,n in [(k,sizes[k]) for k in order]+[('F',P)]:
            sym=(lambda r,i: '%s%d.%d.%d'%(name,step,r,i)) if name!='F' else (lambda r,i: 'F%d.%d.%d'%(step,r,i))
            want=cpu_ring([[sym(r,i) for i in range(n)] for r in range(R)])
            for r in range(R):
                got=mem['res%s%d.%d'%(name,step,r)]
                assert got==want[r], (R,staged,seed,name,step,r,got,want[r])

for R in (2,3,4,5):
    for staged in (False,True):
        for seed in range(300): trial(R,staged,seed)
        for seed in range(100): trial_trainer(R,staged,seed)
print("ok")
