import ConcordSystem
import FileWatching
import Foundation
import Synchronization

/// Tells presenters about their items' versions: the copies file-sync engines make beside them
/// (gained, lost) and the marks that resolve them, whoever made the change. Every process that
/// presents an item watches for itself, through the shared ``FileWatching/InotifyWatcher``, so
/// every presenter on the machine hears the same messages; none of it goes through the
/// coordinating process's presenter messages, so a copy made or removed by a plain `cp`, an
/// engine or a coordination sounds the same.
///
/// A file's presenter watches the file's directory (not its tree); a directory's presenter's
/// own tree watch hands its events over (every event, this process's own writes included). The copies known for each item are kept, so that what
/// changes is told as a difference: a version is gained once, and lost only if it was gained or
/// there when the presenter started.
final class VersionWatching: Sendable {
    static let shared = VersionWatching()

    /// One presenter's version watch.
    final class Watch: Sendable {
        let root: String
        let isDirectory: Bool
        let watch: InotifyWatcher.Watch?
        /// The versions known, by path.
        let known = Mutex<[String: FileVersion]>([:])

        init(root: String, isDirectory: Bool, watch: InotifyWatcher.Watch?) {
            self.root = root
            self.isDirectory = isDirectory
            self.watch = watch
        }
    }

    private let resolutionWatch = Mutex<InotifyWatcher.Watch?>(nil)

    /// Starts (or moves) `registration`'s version watch to the item at canonical path `root`.
    func start(_ registration: PresenterRegistry.Registration, root: String, watcher: InotifyWatcher) {
        if registration.versionWatch.withLock({ $0?.root }) == root { return }
        startResolutionWatch(watcher)
        let isDirectory = ((try? FileSystem.identity(at: root)) ?? nil)?.kind == .directory
        let watched = isDirectory ? root : FileSystem.parentPath(of: root)
        let handle = Mutex<Watch?>(nil)
        // A directory's presenter already watches its tree: its events are forwarded
        // (``forward(_:to:)``) rather than watched, and listed, a second time.
        let watch =
            isDirectory
            ? nil
            : try? watcher.watch(URL(fileURLWithPath: watched), recursive: false, immediate: false, onStop: nil) {
                [weak registration] events in
                guard let registration, let watch = handle.withLock({ $0 }) else { return }
                for message in VersionWatching.messages(for: events, watch: watch, registration: registration) {
                    registration.queue.post(message)
                }
            }
        let created = Watch(root: root, isDirectory: isDirectory, watch: watch)
        // What is there now is known, not gained.
        let directory = URL(fileURLWithPath: watched)
        let initial =
            isDirectory
            ? Self.listVersions(in: directory, items: nil)
            : Self.listVersions(in: directory, items: [URL(fileURLWithPath: root).lastPathComponent])
        created.known.withLock { known in
            for version in initial { known[version.url.path] = version }
        }
        handle.withLock { $0 = created }
        let old = registration.versionWatch.withLock { current in
            defer { current = created }
            return current
        }
        old?.watch?.cancel()
    }

    /// Whether the item at `path` is a conflict copy (or backup) of the item at `item`, by its
    /// name alone.
    static func isCopy(_ path: String, of item: String) -> Bool {
        guard FileSystem.parentPath(of: path) == FileSystem.parentPath(of: item) else { return false }
        let name = URL(fileURLWithPath: path).lastPathComponent
        return ConflictNaming.firstMatch(name, in: ConflictNaming.registered)?.1.originalName
            == URL(fileURLWithPath: item).lastPathComponent
    }

    func stop(_ registration: PresenterRegistry.Registration) {
        registration.versionWatch.withLock { current in
            defer { current = nil }
            return current
        }?.watch?.cancel()
    }

    /// The versions in `directory` of the items named `items` (of every item, for `nil`).
    private static func listVersions(in directory: URL, items: Set<String>?) -> [FileVersion] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else { return [] }
        let nameSet = Set(names)
        let namings = ConflictNaming.registered
        let targets =
            items
            ?? Set(names.compactMap { ConflictNaming.firstMatch($0, in: namings)?.1.originalName })
        return targets.flatMap {
            FileVersion.scan(directory: directory, names: nameSet, itemName: $0, namings: namings)
        }
    }

    /// Hands a directory presenter's events (all of them, this process's own writes included) to
    /// its version watch, on the presenter's queue.
    static func forward(_ events: [FileSystemEvent], to registration: PresenterRegistry.Registration) {
        guard let watch = registration.versionWatch.withLock({ $0 }), watch.isDirectory else { return }
        registration.queue.post {
            for message in messages(for: events, watch: watch, registration: registration) { message() }
        }
    }

    /// Turns a batch of events into the presenter's gained and lost versions, in order.
    private static func messages(
        for events: [FileSystemEvent],
        watch: Watch,
        registration: PresenterRegistry.Registration
    ) -> [@Sendable () -> Void] {
        let namings = ConflictNaming.registered
        let itemName = URL(fileURLWithPath: watch.root).lastPathComponent
        // The (directory, item) pairs whose versions may have changed, in the order first touched.
        var touched: [(directory: String, item: String)] = []
        /// Notes the pair a change at `url` may concern; `content` for a change of content only,
        /// which matters for copies (an engine's atomic save of one) but not for the item itself.
        func touch(_ url: URL, content: Bool = false) {
            let path = url.standardizedFileURL.path
            let directory = FileSystem.parentPath(of: path)
            let name = url.lastPathComponent
            if name.hasSuffix(InotifyWatcher.temporarySuffix) || name.hasPrefix(InotifyWatcher.barrierPrefix) {
                return
            }
            var items: [String] = []
            if let (_, match) = ConflictNaming.firstMatch(name, in: namings) { items.append(match.originalName) }
            // The item itself came or went: its copies' evidence changed. (Inside a directory,
            // only items with known copies: a write to any file must not list its folder.)
            if !content,
                watch.isDirectory ? watch.known.withLock({ $0.values.contains { $0.itemURL.path == path } }) : true
            {
                items.append(name)
            }
            for item in items {
                if !watch.isDirectory && (directory != FileSystem.parentPath(of: watch.root) || item != itemName) {
                    continue
                }
                if watch.isDirectory && !(path.hasPrefix(watch.root + "/")) { continue }
                if !touched.contains(where: { $0.directory == directory && $0.item == item }) {
                    touched.append((directory, item))
                }
            }
        }
        for event in events {
            switch event {
            case .changed(let url):
                touch(url, content: true)
            case .appeared(let url), .removed(let url):
                touch(url)
            case .moved(let from, let to):
                touch(from)
                touch(to)
            case .rescanned:
                let known = watch.known.withLock { Array($0.values) }
                for version in known {
                    touch(version.itemURL)
                }
                if !watch.isDirectory { touch(URL(fileURLWithPath: watch.root)) }
            }
        }
        var messages: [@Sendable () -> Void] = []
        for (directory, item) in touched {
            let directoryURL = URL(fileURLWithPath: directory)
            let current = listVersions(in: directoryURL, items: [item])
            let itemPath = directory + "/" + item
            let (gained, lost) = watch.known.withLock { known -> ([FileVersion], [FileVersion]) in
                let before = known.values.filter { $0.itemURL.path == itemPath }
                let gained = current.filter { known[$0.url.path] == nil }
                let currentPaths = Set(current.map(\.url.path))
                let lost = before.filter { !currentPaths.contains($0.url.path) }
                for version in lost { known[version.url.path] = nil }
                for version in gained { known[version.url.path] = version }
                return (gained, lost.sorted { $0.url.path < $1.url.path })
            }
            guard let presenter = registration.presenter else { continue }
            let isDirectory = watch.isDirectory
            for version in lost {
                messages.append { @Sendable in
                    if isDirectory {
                        presenter.presentedSubitem(at: version.itemURL, didLose: version)
                    } else {
                        presenter.presentedItemDidLose(version)
                    }
                }
            }
            for version in gained {
                messages.append { @Sendable in
                    if isDirectory {
                        presenter.presentedSubitem(at: version.itemURL, didGain: version)
                    } else {
                        presenter.presentedItemDidGain(version)
                    }
                }
            }
        }
        return messages
    }

    // MARK: - Resolution marks

    /// Watches the marks folder once per process, for every presenter.
    private func startResolutionWatch(_ watcher: InotifyWatcher) {
        if resolutionWatch.withLock({ $0 }) != nil { return }
        guard let directory = try? VersionResolutions.directory() else { return }
        let watch = try? watcher.watch(URL(fileURLWithPath: directory), recursive: false, immediate: false, onStop: nil)
        {
            events in
            for event in events {
                switch event {
                case .appeared(let url), .changed(let url), .moved(_, let url):
                    guard url.lastPathComponent.hasSuffix(".resolved") else { continue }
                    VersionWatching.resolved(markAt: url.path)
                default:
                    continue
                }
            }
        }
        let redundant = resolutionWatch.withLock { current -> InotifyWatcher.Watch? in
            if current != nil { return watch }
            current = watch
            return nil
        }
        redundant?.cancel()
    }

    /// A mark appeared: the presenters that know the copy it names hear it is resolved.
    private static func resolved(markAt file: String) {
        guard let mark = VersionResolutions.read(file) else { return }
        for registration in PresenterRegistry.shared.snapshot() {
            guard let watch = registration.versionWatch.withLock({ $0 }), let presenter = registration.presenter,
                let version = watch.known.withLock({ $0[mark.path] }),
                VersionResolutions.text(of: version.identity) == mark.identity
            else { continue }
            if watch.isDirectory {
                registration.queue.post { presenter.presentedSubitem(at: version.itemURL, didResolve: version) }
            } else {
                registration.queue.post { presenter.presentedItemDidResolveConflict(version) }
            }
        }
    }
}
