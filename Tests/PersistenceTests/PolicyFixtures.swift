import ConcordTestSupport
import Foundation
import Persistence

/// One simulated device: its own store and coordinator, with the given policies.
struct Device {
    let name: String
    let directory = TemporaryDirectory("device")
    let coordinator: StoreCoordinator
    let store: any PersistentStore

    init(
        _ name: String,
        schema: Schema,
        repair: [any ValidationRepairPolicy] = [],
        uniqueness: [any UniquenessPolicy] = []
    ) throws {
        self.name = name
        let registry = StoreRegistry()
        registry.register(SnapshotStore.self)
        coordinator = StoreCoordinator(schema: schema, registry: registry)
        for policy in repair { coordinator.policies.register(policy) }
        for policy in uniqueness { coordinator.policies.register(policy) }
        store = try coordinator.addStore(ofType: "snapshot", at: directory("\(name).json"))
    }

    func context(_ origin: ChangeOrigin = .local) -> ObjectContext {
        let context = ObjectContext(coordinator: coordinator, origin: origin)
        context.name = name
        return context
    }

    /// Every record, entity by entity, in id order.
    func contents() throws -> [Record] {
        try coordinator.schema.entities.flatMap { try store.fetch(FetchRequest(entity: $0.name)) }
    }

    /// Applies `records` (another device's data) as an import, as the sync layer will.
    func importRecords(_ records: [Record]) throws {
        let context = context(.import)
        for record in records.sorted(by: { $0.id < $1.id }) { try context.insert(record) }
        try context.save()
    }
}
