import ConcordSystem
import Foundation

/// One coordination's conversation with the presenters of its items in other processes (see
/// ``PresenterDirectory`` and ``PresenterChannel``).
///
/// ``prepare(deadline:token:)`` runs before any lock is taken, as the messages to this process's
/// presenters do (invariant 6 across processes: a presenter that coordinates inside its hook
/// never waits for a lock this coordination holds). ``finish(outcomes:moves:)`` runs after every
/// lock is released.
final class RemotePresenters {
    private struct Peer {
        var process: Int32
        var fd: Int32
    }

    private let items: [CoordinatedItem]
    private var peers: [Peer] = []
    private let processes: [Int32]
    /// The coordination's own deadline, if it has one.
    private var deadline: Deadline?

    /// The conversation for `items`, or `nil` when no other process presents anything involved
    /// (the common case, which costs a `stat` of the presenter directory).
    init?(items: [CoordinatedItem]) {
        let processes = PresenterDirectory.shared.processes(involvedIn: items)
        if processes.isEmpty { return nil }
        self.items = items
        self.processes = processes
    }

    deinit { for peer in peers { LocalSocket.close(peer.fd) } }

    /// Asks every involved process's presenters to save, relinquish or accommodate, all at once,
    /// and waits (bounded) for every answer.
    ///
    /// A process that died, before or while it was asked, is skipped. On failure, the processes
    /// already asked are told that the access will not happen (their presenters get their items
    /// back).
    func prepare(deadline: Deadline?, token: CoordinationToken) throws(FileCoordinationError) {
        self.deadline = deadline
        let limit = FileCoordinator.presenterResponseLimit
        let bound = [deadline, Deadline.after(limit)].compactMap { $0 }.min()!
        let remaining = Int64(
            bound.nanoseconds > Deadline.now.nanoseconds
                ? (bound.nanoseconds - Deadline.now.nanoseconds) / 1_000_000 : 0
        )
        let request =
            (try? JSONEncoder().encode(PresenterRequest(prepare: items, timeout: remaining))).map(Array.init) ?? []
        for process in processes {
            guard let path = PresenterDirectory.shared.socketPath(of: process) else { continue }
            let fd: Int32
            do {
                guard let connected = try LocalSocket.connect(to: path, until: bound) else {
                    // Nobody listens: the process is gone. Its entry goes too.
                    PresenterDirectory.shared.forget(process)
                    continue
                }
                fd = connected
            } catch {
                abandon()
                throw error.errno == .resourceTemporarilyUnavailable
                    ? FileCoordinationError(
                        code: .timedOut,
                        url: items.first?.accessorURL,
                        message: "process \(process) accepts no requests from coordinations (it stopped?)",
                        presentingProcess: process
                    )
                    : FileCoordinationError(
                        code: .systemCallFailed,
                        url: items.first?.accessorURL,
                        message: "cannot reach presenters in process \(process)",
                        underlyingError: error,
                        presentingProcess: process
                    )
            }
            if (try? LocalSocket.send(fd, request)) == nil {
                LocalSocket.close(fd)
                continue
            }
            peers.append(Peer(process: process, fd: fd))
        }
        var answered: [Peer] = []
        for peer in peers {
            let answer: PresenterAnswer
            do {
                answer = try receive(from: peer, until: bound, token: token)
            } catch LocalSocket.ReceiveFailure.closed {
                // Died while being asked: its presenters are gone, so nothing is left to ask.
                peers.removeAll { $0.fd == peer.fd }
                LocalSocket.close(peer.fd)
                continue
            } catch {
                abandon()
                throw failure(error, peer: peer, deadline: deadline, limit: limit)
            }
            if let failure = answer.failure {
                abandon()
                let code = FileCoordinationError.Code(rawValue: failure.code)
                // The presenting process gave up at the bound this coordination gave it: said
                // the same way as when this side notices first.
                let message =
                    code == .timedOut
                    ? "presenters in process \(peer.process) did not answer within \(Self.bound(deadline, limit)): \(failure.message)"
                    : "in process \(peer.process): \(failure.message)"
                throw FileCoordinationError(
                    code: code,
                    url: failure.url.map { URL(fileURLWithPath: $0) },
                    message: message,
                    underlyingError: RemotePresenterError(
                        process: peer.process,
                        message: failure.cause ?? failure.message
                    ),
                    presentingProcess: peer.process
                )
            }
            answered.append(peer)
        }
        peers = answered
    }

    private func receive(from peer: Peer, until bound: Deadline, token: CoordinationToken) throws -> PresenterAnswer {
        // In slices, so that cancelling the coordination ends the wait soon.
        while true {
            if token.isCancelled { throw CancellationError() }
            let slice = min(bound, Deadline.after(.milliseconds(100))!)
            switch Result(catching: { () throws(LocalSocket.ReceiveFailure) in
                try LocalSocket.receive(peer.fd, until: slice)
            }) {
            case .success(let bytes):
                return try JSONDecoder().decode(PresenterAnswer.self, from: Data(bytes))
            case .failure(.timedOut) where slice < bound:
                continue
            case .failure(let failure):
                throw failure
            }
        }
    }

    private func failure(_ error: any Error, peer: Peer, deadline: Deadline?, limit: Duration) -> FileCoordinationError
    {
        let url = items.first?.accessorURL
        switch error {
        case is CancellationError:
            return FileCoordinationError(
                code: .cancelled,
                url: url,
                message: "cancelled while waiting for presenters in process \(peer.process)",
                presentingProcess: peer.process
            )
        case LocalSocket.ReceiveFailure.timedOut:
            return FileCoordinationError(
                code: .timedOut,
                url: url,
                message: "presenters in process \(peer.process) did not answer within \(Self.bound(deadline, limit))",
                presentingProcess: peer.process
            )
        default:
            return FileCoordinationError(
                code: .systemCallFailed,
                url: url,
                message: "cannot talk to presenters in process \(peer.process)",
                underlyingError: error,
                presentingProcess: peer.process
            )
        }
    }

    /// Which bound a wait for presenters ended at: the coordinator's timeout or the response limit.
    private static func bound(_ deadline: Deadline?, _ limit: Duration) -> String {
        deadline == nil || Deadline.after(limit)! < deadline!
            ? "the presenter response limit (\(limit))" : "the coordinator's timeout"
    }

    /// Tells the processes asked so far that the access will not happen.
    private func abandon() {
        var request = PresenterRequest(kind: .finish, process: PresenterDirectory.currentProcess)
        request.accessed = false
        // Nothing was written: no need to wait until they have dropped their marks.
        send(request, waitingUntil: nil)
    }

    /// Sends `request` to every peer and, when the coordination writes, waits (bounded) for each
    /// to acknowledge: a presenting process marks what a write changes, so that the inotify echo
    /// is not delivered twice, and must drop the marks before anyone else's change can follow.
    private func send(_ request: PresenterRequest, waitingUntil bound: Deadline?) {
        let bytes = (try? JSONEncoder().encode(request)).map(Array.init) ?? []
        let sent = peers.map { (try? LocalSocket.send($0.fd, bytes)) != nil }
        let writes = items.contains(where: \.intent.isWriting)
        for (peer, sent) in zip(peers, sent) {
            if sent && writes, let bound { _ = try? LocalSocket.receive(peer.fd, until: bound) }
            LocalSocket.close(peer.fd)
        }
        peers.removeAll()
    }

    /// The coordination failed before its access (a lock it could not take): nothing changed.
    func cancel() { abandon() }

    /// Tells the processes what the access did; their presenters get their reacquirers, then the
    /// did-change, did-move and did-delete messages (and not again from their inotify watch).
    func finish(outcomes: [PresenterPlan.Outcome], moves: [(from: URL, fromPath: String, to: URL, toPath: String)]) {
        var request = PresenterRequest(kind: .finish, process: PresenterDirectory.currentProcess)
        request.outcomes = outcomes.compactMap { outcome in
            guard
                let index = items.firstIndex(where: { $0.path == outcome.item.path && $0.intent == outcome.item.intent }
                )
            else {
                return nil
            }
            return .init(item: index, existedBefore: outcome.existedBefore, existsAfter: outcome.existsAfter)
        }
        request.moves = moves.map {
            .init(from: $0.from.path, fromPath: $0.fromPath, to: $0.to.path, toPath: $0.toPath)
        }
        // As long as the coordination was willing to wait for them, no longer.
        let limit = Deadline.after(FileCoordinator.presenterResponseLimit)!
        send(
            request,
            waitingUntil: deadline.map { max($0, Deadline.after(.milliseconds(100))!) }.map { min($0, limit) } ?? limit
        )
    }
}
