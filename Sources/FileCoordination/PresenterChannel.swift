import ConcordSystem
import Foundation
import Logging
import Synchronization

/// What a coordination in another process sends a presenting process, and what it answers.
///
/// One connection per coordination: `prepare` (the items and how they are accessed) is answered
/// once this process's presenters have saved, relinquished or accommodated (or one of them
/// vetoed); `finish` (what the access did) follows once the coordination released its locks, and
/// is acknowledged once this process stopped taking changes to the items for the access's echo. A connection that closes without `finish` means the coordinating process
/// died or gave up: what the access did is then found out here.
struct PresenterRequest: Codable {
    enum Kind: String, Codable { case prepare, finish }
    struct Item: Codable {
        var path: String
        var url: String
        var writing: Bool
        var options: UInt
    }
    struct Outcome: Codable {
        var item: Int
        var existedBefore: Bool
        var existsAfter: Bool
    }
    struct Move: Codable {
        var from: String
        var fromPath: String
        var to: String
        var toPath: String
    }

    var kind: Kind
    /// The coordinating process.
    var process: Int32
    var items: [Item] = []
    /// How long the presenters may take to answer.
    var timeoutMilliseconds: Int64 = 0
    /// Whether the access ran (`false`: the coordination failed before it, and nothing changed).
    var accessed = true
    var outcomes: [Outcome] = []
    var moves: [Move] = []

    init(kind: Kind, process: Int32) {
        self.kind = kind
        self.process = process
    }

    init(prepare items: [CoordinatedItem], timeout: Int64) {
        self.init(kind: .prepare, process: PresenterDirectory.currentProcess)
        self.items = items.map { item in
            switch item.intent.access {
            case .reading(let options):
                Item(path: item.path, url: item.accessorURL.path, writing: false, options: options.rawValue)
            case .writing(let options):
                Item(path: item.path, url: item.accessorURL.path, writing: true, options: options.rawValue)
            }
        }
        timeoutMilliseconds = timeout
    }

    var coordinatedItems: [CoordinatedItem] {
        items.map { item in
            let url = URL(fileURLWithPath: item.url)
            let intent: FileAccessIntent =
                item.writing
                ? .writingIntent(with: url, options: .init(rawValue: item.options))
                : .readingIntent(with: url, options: .init(rawValue: item.options))
            return CoordinatedItem(intent: intent, path: item.path, accessorURL: url)
        }
    }
}

/// A presenting process's answer to `prepare`: nothing, or why a presenter refused.
struct PresenterAnswer: Codable {
    struct Failure: Codable {
        var code: String
        var message: String
        var url: String?
        var cause: String?
    }
    var failure: Failure?
}

/// The cause of a ``FileCoordinationError`` raised by a presenter in another process: the error
/// it threw, as text (errors do not cross processes).
public struct RemotePresenterError: Error, Sendable, CustomStringConvertible {
    /// The presenting process.
    public var process: Int32
    /// What the presenter's error said.
    public var message: String
    /// The process and the message, on one line.
    public var description: String { "process \(process): \(message)" }
}

/// This process's end of cross-process presenter messaging: a socket in the presenter directory
/// on which coordinations in other processes ask this process's presenters, through the same
/// plan (and the same serial queues, in the same order) as coordinations in this process do.
///
/// One thread accepts; each coordination's connection is served on a thread of its own, which
/// waits for this process's presenters (never on a lock a coordination holds).
final class PresenterChannel: Sendable {
    static let shared = PresenterChannel()

    private let listener = Mutex<Int32?>(nil)
    private let failed = Mutex(false)

    /// Starts listening, once. `false` if the socket cannot be set up (said once in the log).
    func startIfNeeded() -> Bool {
        if listener.withLock({ $0 }) != nil { return true }
        if failed.withLock({ $0 }) { return false }
        guard let path = PresenterDirectory.shared.socketPath(of: PresenterDirectory.currentProcess) else {
            return false
        }
        let fd: Int32
        do {
            fd = try LocalSocket.listen(at: path)
        } catch {
            failed.withLock { $0 = true }
            PresenterWatching.shared.logger.withLock { $0 }.warning(
                "presenters in this process will not be asked before other processes' coordinations: \(error)"
            )
            return false
        }
        let started = listener.withLock { current -> Bool in
            if current != nil { return false }
            current = fd
            return true
        }
        if !started {
            LocalSocket.close(fd)
            return true
        }
        let thread = Thread { [self] in accept(on: fd) }
        thread.name = "concord.presenter-channel"
        thread.start()
        return true
    }

    private func accept(on fd: Int32) {
        while true {
            guard let connection = try? LocalSocket.accept(fd) else {
                // Out of descriptors, say: let some connections end before accepting more.
                Thread.sleep(forTimeInterval: 0.01)
                continue
            }
            Thread.detachNewThread { [self] in serve(connection) }
        }
    }

    private func serve(_ connection: Int32) {
        defer { LocalSocket.close(connection) }
        guard let bytes = try? LocalSocket.receive(connection, until: Deadline.after(.seconds(10))),
            let request = try? JSONDecoder().decode(PresenterRequest.self, from: Data(bytes)), request.kind == .prepare
        else { return }
        let items = request.coordinatedItems
        let plan = PresenterPlan(registry: .shared, excluding: nil)
        let deadline = Deadline.after(.milliseconds(max(0, request.timeoutMilliseconds)))
        var answer = PresenterAnswer()
        var reacquirers: [Reacquirer] = []
        do {
            reacquirers = try plan?.prepare(items, deadline: deadline, token: CoordinationToken()) ?? []
        } catch {
            answer.failure = .init(
                code: error.code.description,
                message: error.message,
                url: error.url?.path,
                cause: error.underlyingError.map { "\($0)" }
            )
        }
        // The access cannot start before the answer: mark what it writes, so its inotify echo
        // is not delivered a second time after the messages below.
        let writes = answer.failure == nil ? items.filter(\.intent.isWriting) : []
        let paths = writes.map(\.path)
        if !paths.isEmpty { EchoFilter.shared.begin(paths, coversContents: writes.map(\.intent.coversContents)) }
        let existedBefore = items.map { $0.intent.isWriting && exists($0.path) }
        let sent = (try? LocalSocket.send(connection, Array(JSONEncoder().encode(answer)))) != nil
        if answer.failure != nil { return }

        // Wait for the end of the access, however long the coordination holds the item; a
        // closed connection means the coordinating process died or gave up.
        var finish: PresenterRequest?
        if sent, let bytes = try? LocalSocket.receive(connection, until: nil) {
            finish = try? JSONDecoder().decode(PresenterRequest.self, from: Data(bytes))
        }
        if !paths.isEmpty {
            EchoFilter.shared.end(paths, identities: paths.map { (try? FileSystem.identity(at: $0)) ?? nil })
        }
        PresenterPlan.post(reacquirers)
        // The coordination returns only once this is acknowledged: its marks are gone, so no
        // change made after it (by anyone) is taken for its echo, and its messages are queued
        // ahead of any later coordination's.
        defer { if finish != nil { try? LocalSocket.send(connection, Array(#"{}"#.utf8)) } }
        guard let plan, finish?.accessed ?? true else { return }
        let outcomes: [PresenterPlan.Outcome] =
            finish.map { finish in
                finish.outcomes.compactMap { outcome in
                    guard items.indices.contains(outcome.item) else { return nil }
                    return .init(
                        item: items[outcome.item],
                        existedBefore: outcome.existedBefore,
                        existsAfter: outcome.existsAfter
                    )
                }
            }
            ?? items.indices.filter { items[$0].intent.isWriting }.map { index in
                .init(item: items[index], existedBefore: existedBefore[index], existsAfter: exists(items[index].path))
            }
        let moves = (finish?.moves ?? []).map { move in
            (
                from: URL(fileURLWithPath: move.from), fromPath: move.fromPath, to: URL(fileURLWithPath: move.to),
                toPath: move.toPath
            )
        }
        plan.finish(outcomes, moves: moves)
    }

    private func exists(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil) != nil }
}
