"""mpi4py's own API through the interposer (run under mpirun with libgpustripe_mpi.so preloaded):
pickled send/recv both ways (mpi4py's recv uses MPI_Mprobe/MPI_Mrecv by default), any source,
and a device buffer (the interposer's test allocator) received after a matched probe. Prints
"mpi4py_pickled: all checks passed" on rank 0."""
import ctypes
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
peer = rank ^ 1
ok = True
if peer < size:
    for i in range(3):
        obj = {"from": rank, "i": i, "data": list(range(i * 1000))}
        if rank % 2 == 0:
            comm.send(obj, dest=peer, tag=i)
            got = comm.recv(source=MPI.ANY_SOURCE, tag=i)
        else:
            got = comm.recv(source=peer, tag=i)
            comm.send(obj, dest=peer, tag=i)
        ok = ok and got == {"from": peer, "i": i, "data": list(range(i * 1000))}
    lib = ctypes.CDLL(None)
    lib.gpustripe_mpi_test_alloc.restype = ctypes.c_void_p
    lib.gpustripe_mpi_test_alloc.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.gpustripe_mpi_test_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    lib.gpustripe_mpi_test_device_count.restype = ctypes.c_int
    n = (1 << 20) + 7
    dev = lib.gpustripe_mpi_test_alloc(rank % lib.gpustripe_mpi_test_device_count(), n)
    host = bytearray((j * 7 + rank) % 251 for j in range(n))
    hbuf = (ctypes.c_char * n).from_buffer(host)
    if rank % 2 == 0:
        lib.gpustripe_mpi_test_copy(dev, ctypes.addressof(hbuf), n)
        comm.Send([MPI.buffer.fromaddress(dev, n), MPI.BYTE], dest=peer, tag=9)
    else:
        st = MPI.Status()
        msg = comm.mprobe(source=peer, tag=9, status=st)
        ok = ok and st.Get_count(MPI.BYTE) == n
        msg.Recv([MPI.buffer.fromaddress(dev, n), MPI.BYTE])
        lib.gpustripe_mpi_test_copy(ctypes.addressof(hbuf), dev, n)
        ok = ok and bytes(host) == bytes((j * 7 + peer) % 251 for j in range(n))
ok = comm.allreduce(1 if ok else 0, op=MPI.MIN) == 1
if rank == 0 and ok:
    print("mpi4py_pickled: all checks passed", flush=True)
sys.exit(0 if ok else 1)
